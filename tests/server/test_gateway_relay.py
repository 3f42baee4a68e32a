"""Who may speak for other clients (docs/protocol.md, "Gateways"): on a broker with
authentication only its gateway identity and super users; a normal user's heartbeat that
claims to relay a gRPC client is taken as its own."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import Admin, ClientConfig
from pocketmq.client.connection import ClientConnection, connect
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER

pytestmark = pytest.mark.integration


def _user(broker: BrokerProcess, *args: str) -> None:
    command = [sys.executable, "-m", "pocketmq", "user", *args]
    command += ["--data-dir", str(broker.data_dir / "data")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _consumers(broker: BrokerProcess, group: str) -> dict[str, Any]:
    token = (broker.data_dir / "data" / "config" / "http.token").read_text().strip()
    request = urllib.request.Request(
        f"http://{broker.http}/api/groups/{group}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        detail = json.loads(answer.read())
    return {c["client_id"]: c for c in detail["consumers"]}


async def _claim_to_relay(
    broker: BrokerProcess, key: str, secret: str, group: str
) -> ClientConnection:
    """A connection as ``key`` whose heartbeat claims to relay a Java gRPC consumer."""
    connection = await connect(
        broker.address, f"{key}-connection", timeout=5, credentials=(key, secret)
    )
    registration = w.ConsumerRegistration(group, "clustering", {group: "*"})
    heartbeat = w.HeartbeatRequest(
        f"relayed-by-{key}", [], [registration], "grpc", "java", "5.0.7", "10.9.8.7:1234"
    )
    await connection.request(RequestCode.HEARTBEAT, heartbeat, w.Empty, 5)
    return connection


async def test_only_super_users_and_the_gateway_may_relay(tmp_path: Path) -> None:
    extra = ("--authentication",)
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, http_port=0, extra_args=extra) as b:
        _user(b, "create", "root", "--secret", "root-secret", "--type", "super")
        _user(b, "create", "dave", "--secret", "daves-secret")
        await asyncio.sleep(1.1)  # the broker reads user edits within a second
        root = ClientConfig(access_key="root", secret_key="root-secret")
        async with Admin(servers=b.address, client=root) as admin:
            await admin.create_topic("relayed", queues=1)
            await admin.create_group("relayed")
        connections = [
            await _claim_to_relay(b, "root", "root-secret", "relayed"),
            await _claim_to_relay(b, "dave", "daves-secret", "relayed"),
        ]
        try:
            consumers = await asyncio.to_thread(_consumers, b, "relayed")
        finally:
            for connection in connections:
                connection.close()
    relayed = consumers["relayed-by-root"]
    assert (relayed["protocol"], relayed["language"], relayed["address"]) == (
        "grpc",
        "java",
        "10.9.8.7:1234",
    )
    claimed = consumers["relayed-by-dave"]  # a normal user speaks only for itself
    assert (claimed["protocol"], claimed["language"]) == ("native", "python")
    assert claimed["address"] != "10.9.8.7:1234"
