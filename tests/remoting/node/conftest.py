"""ali-ons, a pure JavaScript client of RocketMQ's remoting protocol, for the remoting suite.

The package (npm ``ali-ons``, pinned in ``package.json``/``package-lock.json`` next to this file)
is installed by ``scripts/prerequisites.sh`` (``make test`` runs it), as the official Node.js
gRPC client is for tests/grpc/node. Two ways of running it:

- :func:`run_node`: ali-ons' own encoders and decoders against pocketmq's codec (``node -e``
  per test, a few hundred milliseconds each);
- :class:`OnsDriver`: ``driver.js``, one long-lived ``node`` process taking one JSON command per
  line, whose producers and consumers talk to a real ``pocketmq serve`` (as tests/grpc/node's
  driver does for the gRPC client).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
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


class OnsError(Exception):
    """A driver command that failed: the JavaScript error's name, RocketMQ code and message."""

    def __init__(self, name: str, code: int | None, message: str) -> None:
        super().__init__(f"{name} (code {code}): {message}")
        self.name = name
        self.code = code
        self.message = message


class OnsDriver:
    """``node driver.js`` (module doc): :meth:`call` sends one command, returns its result."""

    def __init__(self, log_dir: Path) -> None:
        project = require_ali_ons()
        self.log_path = log_dir / "ali-ons-driver.log"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                ["node", "driver.js"],
                cwd=project,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, "HOME": str(log_dir)},  # ali-ons keeps files under $HOME
            )
        self._ids = 0
        self._buffer = b""

    def call(self, op: str, timeout: float = 30.0, **fields: Any) -> Any:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._ids += 1
        command = {"id": self._ids, "op": op, **fields}
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            line, newline, rest = self._buffer.partition(b"\n")
            if newline:
                self._buffer = rest
                answer = json.loads(line)
                if answer["id"] != command["id"]:
                    continue  # the answer to a command that timed out earlier
                if "error" in answer:
                    error = answer["error"]
                    raise OnsError(error["name"], error["code"], error["message"])
                return answer["result"]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"the ali-ons driver did not answer {op} within {timeout} s")
            ready, _, _ = select.select([self.process.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(
                        f"the ali-ons driver exited ({self.process.wait()}):\n"
                        + self.log_path.read_text()
                    )
                self._buffer += chunk

    def close(self, timeout: float = 10.0) -> None:
        """Close stdin (the driver closes its clients and exits); kill it if it lingers."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
