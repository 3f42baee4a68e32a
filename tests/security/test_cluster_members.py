"""The operator guide of docs/security.md, "Trust inside the cluster", run as written: a cluster
key made with ``pocketmq cluster key create``, a stand-alone name server with authentication,
a broker and a stand-alone proxy holding the key. Members register and relay but do not
administer; a broker with another key is not believed; a name server needs the key to start;
and a name server keeps a bounded number of registrations whoever sends them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pocketmq import Message
from pocketmq.client import Admin, ClientConfig, Producer
from pocketmq.errors import Code, NoPermissionError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.cluster import CLUSTER_USER, load_cluster_key
from pocketmq.server.namesrv.server import NameServer
from pocketmq.testing import BrokerProcess, NameServerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_dir
from .peers import RawPeer

pytestmark = pytest.mark.integration

ROOT = ClientConfig(access_key="root", secret_key="root-secret")


def _pocketmq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pocketmq", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)


@dataclass
class Members:
    key: Path
    namesrv: NameServerProcess
    broker: BrokerProcess
    root: Path


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Members]:
    with scratch_dir(tmp_path_factory, "members") as root:
        key = root / "cluster.key"
        assert _pocketmq("cluster", "key", "create", str(key)).returncode == 0
        for data in (root / "namesrv", root / "broker" / "data"):  # the same users on both
            made = _pocketmq("user", "create", "root", "--secret", "root-secret", "--type",
                             "super", "--data-dir", str(data))  # fmt: skip
            assert made.returncode == 0, made.stderr
        namesrv = NameServerProcess(
            root / "ns",
            extra_args=(
                "--authentication",
                "--cluster-key",
                str(key),
                "--data-dir",
                str(root / "namesrv"),
            ),
        )
        try:
            with BrokerProcess(
                root / "broker",
                namesrv=namesrv.address,
                config=FAST_BROKER,
                grpc_port=None,
                extra_args=("--authentication", "--cluster-key", str(key)),
            ) as broker:
                yield Members(key, namesrv, broker, root)
        finally:
            namesrv.stop()


async def test_brokers_register_with_the_key_and_clients_route_through_the_name_server(
    members: Members,
) -> None:
    async with Admin(servers=members.namesrv.address, client=ROOT) as admin:
        await admin.create_topic("keyed", queues=2)
        assert [b.address for b in await admin.brokers()] == [members.broker.address]
    async with Producer(servers=members.namesrv.address, client=ROOT) as producer:
        sent = await producer.send(Message(topic="keyed", body=b"routed"))
    assert sent.broker_name == "broker-a"


async def test_a_member_relays_and_reads_but_does_not_administer(members: Members) -> None:
    member = ClientConfig(access_key=CLUSTER_USER, secret_key=load_cluster_key(members.key).current)
    async with Admin(servers=members.broker.address, client=member) as admin:
        assert "keyed" in {t.name for t in await admin.list_topics()}
        assert await admin.broker_status()
        for change in (
            admin.create_topic("by-a-member", queues=1),
            admin.delete_topic("keyed"),
            admin.create_group("by-a-member"),
        ):
            with pytest.raises(NoPermissionError, match="cluster/inner may not ask"):
                await change
    async with Producer(servers=members.broker.address, client=member) as producer:
        assert (await producer.send(Message(topic="keyed", body=b"relayed"))).message_id


async def test_a_broker_with_another_key_is_not_believed(members: Members, tmp_path: Path) -> None:
    other = tmp_path / "other.key"
    assert _pocketmq("cluster", "key", "create", str(other)).returncode == 0
    with BrokerProcess(
        tmp_path / "impostor",
        namesrv=members.namesrv.address,
        broker_name="broker-a",  # claims the real group
        config=FAST_BROKER,
        grpc_port=None,
        extra_args=("--authentication", "--cluster-key", str(other)),
    ) as impostor:
        await asyncio.sleep(0.5)
        assert "registration with the name server failed" in impostor.log()
        async with Admin(servers=members.namesrv.address, client=ROOT) as admin:
            assert [b.address for b in await admin.brokers()] == [members.broker.address]


def test_a_name_server_with_authentication_needs_the_key(members: Members) -> None:
    started = _pocketmq("namesrv", "--port", "0", "--authentication")
    assert started.returncode != 0
    assert "needs the cluster's key: --cluster-key FILE" in started.stderr


def test_a_stand_alone_proxy_signs_in_as_a_member(members: Members, tmp_path: Path) -> None:
    pytest.importorskip("rocketmq")
    from ..server.test_authentication import _send

    env = {**os.environ}
    env.pop("POCKETMQ_ACCESS_KEY", None)
    command = [sys.executable, "-m", "pocketmq", "proxy", "--broker", members.broker.address,
               "--grpc-port", "0", "--authentication", "--cluster-key", str(members.key),
               "--data-dir", str(members.root / "broker" / "data")]  # fmt: skip
    with (tmp_path / "proxy.log").open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("pocketmq proxy ready"), (tmp_path / "proxy.log").read_text()
            endpoint = line.split("grpc=", 1)[1].split()[0]
            assert _send(members.broker, "root", "root-secret", endpoint, "keyed") == ""
        finally:
            process.terminate()
            assert process.wait(15) == 0
            process.stdout.close()  # type: ignore[union-attr]


async def test_a_name_server_keeps_a_bounded_number_of_registrations() -> None:
    """Without authentication anyone may register — at most ``max_registered_brokers``
    distinct brokers; those known register again whatever the count."""
    server = NameServer()  # the default limit: 1024
    await server.start("127.0.0.1", 0)
    peer = await RawPeer.open(server.address)
    try:
        await peer.hello()
        codes = []
        for number in range(1025):
            me = w.BrokerAddress(f"g{number}", f"10.0.0.1:{number + 1}", "", 0, "master", 1)
            codes.append((await peer.request(RequestCode.REGISTER_BROKER,
                                             w.RegisterBrokerRequest(me, []))).code)  # fmt: skip
        assert codes[:1024] == [Code.SUCCESS] * 1024
        assert codes[1024] == Code.TOO_MANY_REQUESTS
        again = w.BrokerAddress("g7", "10.0.0.1:8", "", 0, "master", 2)
        renewed = await peer.request(
            RequestCode.REGISTER_BROKER, w.RegisterBrokerRequest(again, [])
        )
        assert renewed.code == Code.SUCCESS
    finally:
        await peer.aclose()
        await server.close()
