"""Brokers read each other's figures over the authenticated native port (server/peers.py,
``BROKER_OVERVIEW``; docs/operations.md, "Cluster view"): in a cluster with authentication a
broker signs in to its peers as a member, with the cluster key, and a link holding another key
is refused — the page shows every member of its own cluster with its figures."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pocketmq.errors import BrokerConnectionError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.cluster import ClusterKeyFile, create_cluster_key
from pocketmq.server.auth.users import UserStore
from pocketmq.server.peers import PeerLink
from pocketmq.testing import BrokerProcess, NameServerProcess

pytestmark = pytest.mark.integration


def _cluster(broker: BrokerProcess, token: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{broker.http}/api/cluster", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return dict(json.loads(reply.read()))


async def test_peers_sign_in_with_the_cluster_key_and_another_key_is_refused(
    tmp_path: Path,
) -> None:
    key = tmp_path / "cluster.key"
    create_cluster_key(key)
    users = tmp_path / "ns-data" / "config"
    users.mkdir(parents=True, mode=0o700)
    UserStore(users).create("root", "root-secret", "super")  # clients of the name server
    secured = ("--authentication", "--cluster-key", str(key))
    namesrv = NameServerProcess(
        tmp_path / "namesrv", extra_args=(*secured, "--data-dir", str(tmp_path / "ns-data"))
    )
    try:
        common: dict[str, Any] = {"namesrv": namesrv.address, "grpc_port": None}
        with (
            BrokerProcess(tmp_path / "a", broker_name="a", extra_args=secured, **common) as a,
            BrokerProcess(
                tmp_path / "b", broker_name="b", http_port=0, extra_args=secured, **common
            ) as b,
        ):
            await asyncio.sleep(0.5)  # every registration made
            token = (tmp_path / "b" / "data" / "config" / "http.token").read_text().strip()
            seen = await asyncio.to_thread(_cluster, b, token)
            member = PeerLink(a.address, "peer:test", cluster_key=ClusterKeyFile(key))
            stranger_key = tmp_path / "other.key"
            create_cluster_key(stranger_key)
            stranger = PeerLink(a.address, "peer:test", cluster_key=ClusterKeyFile(stranger_key))
            nobody = PeerLink(a.address, "peer:test")
            try:
                figures = await member.call(
                    RequestCode.BROKER_OVERVIEW, w.Empty(), w.BrokerOverviewResponse
                )
                with pytest.raises(BrokerConnectionError, match="refused this broker"):
                    await stranger.call(
                        RequestCode.BROKER_OVERVIEW, w.Empty(), w.BrokerOverviewResponse
                    )
                with pytest.raises(BrokerConnectionError, match="cluster's key"):
                    await nobody.call(
                        RequestCode.BROKER_OVERVIEW, w.Empty(), w.BrokerOverviewResponse
                    )
            finally:
                for link in (member, stranger, nobody):
                    await link.close()
    finally:
        namesrv.stop()
    assert figures.broker_name == "a"
    rows = {row["group"]: row for row in seen["brokers"]}
    assert sorted(rows) == ["a", "b"]
    assert rows["a"]["reachable"], rows["a"]["error"]
    assert rows["a"]["figures"]["broker_name"] == "a"
    assert rows["a"]["address"] == a.address
    assert rows["b"]["http_address"] == b.http
