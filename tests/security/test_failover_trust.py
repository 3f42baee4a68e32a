"""Issue 28's "must show": a failover group started as docs/replication.md §7 and §9 say, with
authentication on, passes the failover tests.

A stand-alone name server with ``--authentication --cluster-key K`` (its data directory holds the
same users as the brokers), etcd, and three brokers of group ``g1`` with ``--authentication
--authorization --cluster-key K --controller etcd://…`` (short controller timings). An SDK
producer and a consumer signed in as a normal user — granted Pub and Sub on the topic, nothing
else — work through the name server. A rogue that claims at the name server to be the group's
master at a much higher epoch, without the key and then with the user's keys, is refused and
changes nobody's role. Then ``kill -9`` of the master: a slave is elected, sends go on, and
every message acknowledged OK is read by the consumer (docs/security.md, "Trust inside the
cluster"; docs/replication.md §6, §9).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pocketmq.client import Admin, ClientConfig, SendStatus, SimpleConsumer
from pocketmq.client.connection import connect
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.acl import AclStore, make_rule
from pocketmq.server.auth.cluster import create_cluster_key
from pocketmq.server.auth.users import UserStore
from pocketmq.testing import EtcdProcess, NameServerProcess

from ..integration.conftest import eventually
from ..replication.conftest import FAST_CONTROLLER, Group, group_config
from ..replication.probes import own_status, role_of, wait_for_master
from ..replication.test_freeze import TimedTraffic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = ("root", "root-secret")  # the operator (super user)
APP = ("app", "app-secret")  # the application: Pub and Sub on T, Sub on group G


def _users(config_dir: Path, *, acl: bool) -> None:
    """The same users on every member, as `pocketmq user create` / `acl grant` make them."""
    users = UserStore(config_dir)
    users.create(ROOT[0], ROOT[1], "super")
    users.create(APP[0], APP[1])
    if acl:
        rules = AclStore(config_dir)
        rules.grant(make_rule(APP[0], "Topic:T", ["Pub", "Sub"], allow=True))
        rules.grant(make_rule(APP[0], "Group:G", ["Sub"], allow=True))


def _keys(keys: tuple[str, str], servers: str) -> ClientConfig:
    return ClientConfig(servers=(servers,), access_key=keys[0], secret_key=keys[1])


@pytest.fixture
def secured_group(tmp_path: Path) -> Iterator[Group]:
    """etcd, the name server and the three brokers, each with the cluster key."""
    key = tmp_path / "cluster.key"
    create_cluster_key(key)
    _users(tmp_path / "ns" / "config", acl=False)
    for broker_id in range(3):
        _users(tmp_path / "g" / f"b{broker_id}" / "data" / "config", acl=True)
    secure = ("--authentication", "--cluster-key", str(key))
    with EtcdProcess(tmp_path / "etcd") as etcd:
        namesrv = NameServerProcess(
            tmp_path / "ns-log", extra_args=(*secure, "--data-dir", str(tmp_path / "ns"))
        )
        group = Group(
            tmp_path / "g",
            namesrv,
            group_config("sync", FAST_CONTROLLER),
            controller=etcd.url,
            extra_args=(*secure, "--authorization"),
        )
        try:
            group.add_slave()
            group.add_slave()
            yield group
        finally:
            try:
                group.stop()
            finally:
                namesrv.stop()


@dataclass
class Reader:
    """A SimpleConsumer signed in as the application, acknowledging what it reads."""

    servers: str
    bodies: set[bytes] = field(default_factory=set)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        client = _keys(APP, self.servers)
        async with SimpleConsumer("G", "T", client=client, await_duration=0.5) as consumer:
            while True:
                try:
                    for message in await consumer.receive(32, invisible_duration=5):
                        self.bodies.add(message.body)
                        with contextlib.suppress(PocketMQError):  # read again later: fine
                            await consumer.ack(message)
                except PocketMQError:  # the failover: routes change under it
                    await asyncio.sleep(0.2)


async def _claim_newer_master(namesrv: str, epoch: int, credentials: tuple[str, str]) -> str:
    """A rogue registers as g1's master at ``epoch``; returns why it was refused ("" if not)."""
    try:
        connection = await connect(namesrv, "rogue", timeout=3.0, credentials=credentials)
    except PocketMQError as exc:
        return str(exc)
    try:
        rogue = w.BrokerAddress("g1", "127.0.0.1:9", "", 7, "master", epoch, "127.0.0.1:1")
        registration = w.RegisterBrokerRequest(rogue, [w.TopicSpec("T", 2, "normal", 6)])
        await connection.request(
            RequestCode.REGISTER_BROKER, registration, w.RegisterBrokerResponse, 3.0
        )
    except PocketMQError as exc:
        return str(exc)
    finally:
        connection.close()
    return ""


async def _roles(group: Group) -> list[str]:
    return [await role_of(b.address, ROOT) for b in group.members]


async def _in_sync(address: str, count: int) -> bool:
    return int(str((await own_status(address, credentials=ROOT))["in_sync"])) >= count


async def test_a_secured_failover_group_fails_over_and_ignores_a_rogue_claim(
    secured_group: Group,
) -> None:
    group = secured_group
    master, namesrv = group.master, group.namesrv.address
    assert await wait_for_master([master.address], timeout=20, credentials=ROOT)
    async with Admin(servers=master.address, client=_keys(ROOT, master.address)) as admin:
        await admin.create_topic("T", queues=2)
        await admin.create_group("G")
    await eventually(lambda: _in_sync(master.address, 2), timeout=20)
    epoch = int(str((await own_status(master.address, credentials=ROOT))["epoch"]))

    # a rogue claim of a newer master: refused without the key, and with a user's keys
    for credentials in (("", ""), APP):
        refusal = await _claim_newer_master(namesrv, epoch + 50, credentials)
        assert refusal, f"the name server took a registration signed {credentials[0]!r}"
        print(f"rogue claim signed {credentials[0] or 'by nobody'!r}: refused: {refusal}")
    async with Admin(servers=namesrv, client=_keys(ROOT, namesrv)) as admin:
        assert {b.broker_id for b in await admin.brokers()} == {0, 1, 2}

    traffic = TimedTraffic(namesrv, client=_keys(APP, namesrv))
    reader = Reader(namesrv)
    traffic.start()
    reader.task = asyncio.create_task(reader.run())
    try:
        await eventually(lambda: len(traffic.confirmed()) > 30, timeout=20)
        assert await _roles(group) == ["master", "slave", "slave"]  # nobody stepped down
        status = await own_status(master.address, credentials=ROOT)
        assert status["epoch"] == epoch
        master.kill()  # kill -9
        killed = time.monotonic()
        successor = await wait_for_master(
            [s.address for s in group.slaves], timeout=30, credentials=ROOT
        )
        print(f"a slave was elected {time.monotonic() - killed:.1f} s after kill -9")
        acknowledged = len(traffic.confirmed())
        await eventually(lambda: len(traffic.confirmed()) > acknowledged + 30, timeout=20)
    finally:
        await traffic.stop()
    try:
        sent = traffic.confirmed()
        await eventually(lambda: _all_read(reader, sent), timeout=30)
    finally:
        assert reader.task is not None
        reader.task.cancel()
        await asyncio.gather(reader.task, return_exceptions=True)
    after = [status for at, status, _ in traffic.answers if at > killed]
    assert after.count(SendStatus.OK) > 30, after[:10]  # sends go on on the new master
    print(f"{len(sent)} messages acknowledged OK, all read by the consumer")
    new_epoch = int(str((await own_status(successor, credentials=ROOT))["epoch"]))
    assert new_epoch > epoch


def _all_read(reader: Reader, sent: set[bytes]) -> bool:
    return sent <= reader.bodies
