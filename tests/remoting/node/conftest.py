"""ali-ons, a pure JavaScript client of RocketMQ's remoting protocol, for the remoting suite.

The package (npm ``ali-ons``, pinned in ``package.json``/``package-lock.json`` next to this file)
is installed by ``scripts/prerequisites.sh`` (``make test`` runs it), as the official Node.js
gRPC client is for tests/grpc/node. Two ways of running it:

- :func:`run_node`: ali-ons' own encoders and decoders against pocketmq's codec (``node -e``
  per test, a few hundred milliseconds each);
- :class:`OnsDriver`: ``driver.js``, one long-lived ``node`` process taking one JSON command per
  line, whose producers and consumers talk to a real ``pocketmq serve`` (as tests/grpc/node's
  driver does for the gRPC client; tests/nodejs.py is what the two share), and
  :func:`ons_broker`, the ``pocketmq serve`` it talks to.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pocketmq.testing import BrokerProcess

from ...integration.conftest import FAST_BROKER
from ...nodejs import DriverError, LineDriver, require_npm_package
from ...scratch import scratch_dir
from ..conftest import create_users

NODE_PROJECT = Path(__file__).parent


class AliOnsUnavailable(RuntimeError):
    """Raised under CI when Node.js or ali-ons is not installed."""


def require_ali_ons() -> Path:
    """The npm project holding ali-ons; fail (CI) or skip (elsewhere) when it is missing."""
    return require_npm_package(NODE_PROJECT, "ali-ons", "ali-ons", AliOnsUnavailable)


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


class OnsError(DriverError):
    """A driver command that failed: the JavaScript error's name, RocketMQ code and message."""


class OnsDriver(LineDriver):
    """``node driver.js`` (module doc): :meth:`call` sends one command, returns its result."""

    error = OnsError

    def __init__(self, log_dir: Path) -> None:
        # ali-ons keeps files under $HOME, which LineDriver points at log_dir
        super().__init__(require_ali_ons(), log_dir, "ali-ons-driver.log")


@contextmanager
def ons_broker(
    factory: pytest.TempPathFactory, name: str, authentication: bool
) -> Iterator[tuple[BrokerProcess, OnsDriver]]:
    """A remoting-only ``pocketmq serve`` and an ali-ons driver, in a scratch directory;
    with ``authentication`` the broker checks signatures and knows tests/remoting/conftest.py's
    users (``create_users``)."""
    require_ali_ons()
    with scratch_dir(factory, name) as root:
        extra: tuple[str, ...] = ()
        if authentication:
            create_users(root / "broker" / "data")
            extra = ("--authentication",)
        with BrokerProcess(
            root / "broker", config=FAST_BROKER, grpc_port=None, extra_args=extra
        ) as broker:
            driver = OnsDriver(root)
            try:
                yield broker, driver
            finally:
                driver.close()
