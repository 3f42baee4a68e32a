"""What the remoting suites share: the users their authenticated brokers know, the
``pocketmq`` command line that creates them, and a remoting-only broker per module (suites
that need other settings define their own ``broker``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.client import ClientConfig
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_broker

ROOT = ("root", "root-secret-0123456789")  # the super user of :func:`create_users`
ALICE = ("alice", "alice-secret-0123456789")  # and a plain user


def pocketmq_cli(*args: str, data: Path | str | None = None) -> None:
    """Run ``pocketmq *args`` (on the data directory ``data`` when given); fail when it does."""
    command = [sys.executable, "-m", "pocketmq", *args]
    if data is not None:
        command += ["--data-dir", str(data)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def create_users(data: Path | str, *others: tuple[str, str]) -> None:
    """:data:`ROOT` (a super user), :data:`ALICE` and ``others`` (plain users) in the data
    directory ``data``."""
    pocketmq_cli("user", "create", ROOT[0], "--secret", ROOT[1], "--type", "super", data=data)
    for name, secret in (ALICE, *others):
        pocketmq_cli("user", "create", name, "--secret", secret, data=data)


def root_client() -> ClientConfig:
    """The Python SDK's settings signing as :data:`ROOT`."""
    return ClientConfig(access_key=ROOT[0], secret_key=ROOT[1])


@pytest.fixture(scope="module")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """A ``pocketmq serve`` with no gRPC port and FAST_BROKER's settings, per module."""
    name = "remoting-" + request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    with scratch_broker(tmp_path_factory, name, config=FAST_BROKER, grpc_port=None) as process:
        yield process
