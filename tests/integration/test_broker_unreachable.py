"""With the only broker down, a client asking the name server is told the broker is
unreachable, not that the topic does not exist (issue 29 item 15): real processes, a stand-alone
name server and one broker killed with SIGKILL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pocketmq import Message
from pocketmq.client import Admin, Producer
from pocketmq.errors import ServiceUnavailableError
from pocketmq.testing import BrokerProcess, NameServerProcess

pytestmark = pytest.mark.integration


def _send(server: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq", "send", "orders", "x", "--server", server],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_clients_are_told_the_only_broker_is_unreachable(tmp_path: Path) -> None:
    with NameServerProcess(tmp_path / "namesrv") as namesrv:
        empty = _send(namesrv.address)
        assert empty.returncode == 1
        assert "no broker is registered with this name server yet" in empty.stderr
        broker = BrokerProcess(tmp_path / "b", namesrv=namesrv.address, grpc_port=None)
        try:
            async with Admin(servers=namesrv.address) as admin:
                await admin.create_topic("orders", queues=2)
            assert _send(namesrv.address).returncode == 0
        finally:
            broker.kill()
        refused = _send(namesrv.address)
        assert refused.returncode == 1
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith(
            "Error: ServiceUnavailableError: topic 'orders' is on no reachable broker: "
            f"broker-a/0 at {broker.address} went away "
        ), line
        assert "(its connection closed)" in line
        assert "does not exist" not in line
        async with Producer(servers=namesrv.address) as producer:
            with pytest.raises(ServiceUnavailableError, match="no reachable broker"):
                await producer.send(Message(topic="orders", body=b"x"))
        broker.restart()  # it comes back: the topic is served again
        try:
            assert _send(namesrv.address).returncode == 0
        finally:
            broker.stop()
