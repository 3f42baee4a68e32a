"""Brokers read each other's figures over the authenticated native port (server/peers.py,
``BROKER_OVERVIEW``; docs/operations.md, "Cluster view"): a broker with ``--authentication``
answers a peer that signs in with a user's keys, and refuses one without them — the page shows
that broker with the reason, the others as usual."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.server.auth.users import UserStore
from pocketmq.testing import BrokerProcess, NameServerProcess

pytestmark = pytest.mark.integration

SECRET = "peer-secret-0123456789"


@pytest.fixture
def namesrv(tmp_path: Path) -> Iterator[NameServerProcess]:
    with NameServerProcess(tmp_path / "namesrv") as process:
        yield process


def _cluster(broker: BrokerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{broker.http}/api/cluster", timeout=10) as reply:
        return dict(json.loads(reply.read()))


async def test_a_peer_signs_in_with_its_keys_and_one_without_is_refused(
    tmp_path: Path, namesrv: NameServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = tmp_path / "locked" / "data" / "config"
    config_dir.mkdir(parents=True)
    config_dir.chmod(0o700)
    UserStore(config_dir).create("peer", SECRET, "super")
    common: dict[str, Any] = {"namesrv": namesrv.address, "grpc_port": None}
    with BrokerProcess(tmp_path / "locked", broker_name="locked", extra_args=("--authentication",),
                       **common) as locked:  # fmt: skip
        monkeypatch.setenv("POCKETMQ_ACCESS_KEY", "peer")
        monkeypatch.setenv("POCKETMQ_SECRET_KEY", SECRET)
        with BrokerProcess(tmp_path / "keyed", broker_name="keyed", http_port=0, **common) as keyed:
            monkeypatch.delenv("POCKETMQ_ACCESS_KEY")
            monkeypatch.delenv("POCKETMQ_SECRET_KEY")
            with BrokerProcess(tmp_path / "bare", broker_name="bare", http_port=0,
                               **common) as bare:  # fmt: skip
                await asyncio.sleep(0.5)  # every registration made
                seen = await asyncio.to_thread(_cluster, keyed)
                refused = await asyncio.to_thread(_cluster, bare)
    rows = {b["group"]: b for b in seen["brokers"]}
    assert sorted(rows) == ["bare", "keyed", "locked"]
    assert rows["locked"]["reachable"], rows["locked"]["error"]
    assert rows["locked"]["figures"]["broker_name"] == "locked"
    assert rows["locked"]["address"] == locked.address
    rows = {b["group"]: b for b in refused["brokers"]}
    assert not rows["locked"]["reachable"]
    assert "asks for credentials" in rows["locked"]["error"]
    assert rows["keyed"]["reachable"]  # the others are shown as usual
    assert rows["keyed"]["http_address"] == keyed.http
