"""ali-ons, a pure JavaScript client of RocketMQ's remoting protocol, for the remoting suite.

The package (npm ``ali-ons``, pinned in ``package.json``/``package-lock.json`` next to this file)
is installed by ``scripts/prerequisites.sh`` (``make test`` runs it), as the official Node.js
gRPC client is for tests/grpc/node. Until the broker speaks remoting, the tests here run
ali-ons' own encoders and decoders against pocketmq's codec (``node -e`` per test, a few
hundred milliseconds each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_PROJECT = Path(__file__).parent
PACKAGE = NODE_PROJECT / "node_modules" / "ali-ons" / "package.json"


class AliOnsUnavailable(RuntimeError):
    """Raised under CI when Node.js or ali-ons is not installed."""


def require_ali_ons() -> Path:
    """The npm project holding ali-ons; fail (CI) or skip (elsewhere) when it is missing."""
    if shutil.which("node") is not None and PACKAGE.exists():
        return NODE_PROJECT
    if shutil.which("node") is None:
        reason = "`node` is not on PATH: install Node.js 18+, then run scripts/prerequisites.sh"
    else:
        reason = (
            f"ali-ons is not installed in {NODE_PROJECT} "
            "(run scripts/prerequisites.sh, or `npm ci` in that directory)"
        )
    if os.environ.get("CI"):
        raise AliOnsUnavailable(reason)
    pytest.skip(reason)


def run_node(script: str, payload: Any = None, timeout: float = 30.0) -> Any:
    """Run ``script`` (JavaScript) in the ali-ons project with ``payload`` as JSON on stdin;
    return what it printed as JSON on stdout."""
    project = require_ali_ons()
    done = subprocess.run(
        ["node", "-e", script],
        cwd=project,
        input=json.dumps(payload).encode(),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return json.loads(done.stdout)
