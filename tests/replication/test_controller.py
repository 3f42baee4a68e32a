"""Automatic failover through a real etcd (docs/replication.md §9): a killed master is replaced
within seconds with no acknowledged message lost, a master cut off from etcd stops writing before
another takes over, etcd down for everyone stops nothing, and random kills and restarts leave
one master and every acknowledged message."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import pytest

from pocketmq import ConsumeStatus, MessageView
from pocketmq.client import Admin, PushConsumer
from pocketmq.errors import Code, PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..integration.conftest import eventually
from .conftest import status
from .test_failover import Traffic
from .test_group import caught_up, setup_topic, stored_bodies

pytestmark = pytest.mark.integration


async def _role(address: str) -> str:
    try:
        return str((await status(address))["role"])
    except PocketMQError:
        return "down"


async def _masters(members: list[BrokerProcess]) -> list[BrokerProcess]:
    live = [m for m in members if m.running]
    roles = await asyncio.gather(*(_role(m.address) for m in live))
    return [m for m, role in zip(live, roles, strict=True) if role == "master"]


async def _wait_for_master(members: list[BrokerProcess], timeout: float = 30) -> BrokerProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        masters = await _masters(members)
        if len(masters) == 1:
            return masters[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no single master after {timeout} s: {await _masters(members)}")


async def _in_sync_set(master: BrokerProcess) -> list[int]:
    return list((await status(master.address))["controller"].get("isr", []))


async def _wait_in_sync(master: BrokerProcess, size: int) -> None:
    """Until etcd's in-sync set of ``master``'s epoch has ``size`` members."""
    await eventually(lambda: _isr_has(master, size), timeout=30)


async def _isr_has(master: BrokerProcess, size: int) -> bool:
    try:
        return len(await _in_sync_set(master)) >= size
    except PocketMQError:
        return False


@pytest.mark.parametrize(
    "kills", [2, pytest.param(10, marks=[pytest.mark.slow, pytest.mark.timeout(600)])]
)
async def test_a_killed_master_is_replaced_within_seconds_and_loses_no_acknowledged_message(
    etcd: Any, make_group: Any, kills: int
) -> None:
    """SIGKILL the master under SYNC replication, ``kills`` times, while a producer and a push
    consumer run: a slave is master within 10 s each time (the default timings), neither client
    is restarted, every message acknowledged OK is on the last master, and the consumer receives
    every one of them (at least once)."""
    group = make_group("sync", controller=etcd.url)
    members = group.members
    master = group.master
    await setup_topic(master.address)
    async with Admin(servers=master.address) as admin:
        await admin.create_group("watchers")
    await caught_up(master, group.slaves[0])
    await _wait_in_sync(master, 2)
    received: set[bytes] = set()

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        received.update(m.body for m in messages)
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer("watchers", "T", listener, servers=group.namesrv.address)
    await consumer.start()
    traffic = Traffic(group.namesrv.address)
    traffic.start()
    seconds: list[float] = []
    try:
        for _ in range(kills):
            await eventually(lambda: len(traffic.acked) > 50, timeout=20)
            master.kill()
            killed_at = time.monotonic()
            successor = await _wait_for_master(members, timeout=20)
            seconds.append(time.monotonic() - killed_at)
            before = len(traffic.acked)
            await eventually(lambda b=before: len(traffic.acked) > b + 50, timeout=30)
            master.restart()  # it comes back as a slave of the new epoch
            await eventually(lambda m=master: _is(m, "slave"), timeout=30)
            await _wait_in_sync(successor, 2)
            master = successor
    finally:
        await traffic.stop()
    try:
        confirmed = traffic.confirmed()
        await eventually(lambda: confirmed <= received, timeout=60)
    finally:
        await consumer.aclose()
    print(
        f"failover after SIGKILL over {len(seconds)} kills: p50 {statistics.median(seconds):.2f} s,"
        f" max {max(seconds):.2f} s"
    )
    assert max(seconds) < 10, seconds
    stored = set(await stored_bodies(master.address))
    lost = traffic.confirmed() - stored
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
    assert len(await _masters(members)) == 1
    # what an operator sees: one master with its lease and in-sync set, one slave
    rows = [json.loads(line) for line in _cli("--json", server=group.namesrv.address)]
    assert sorted(row["role"] for row in rows) == ["master", "slave"]
    leader = next(row for row in rows if row["role"] == "master")
    assert leader["address"] == master.address
    assert leader["controller"] == "master"
    assert leader["isr"] == "0,1"
    assert leader["failovers"] == 1
    assert 0 < leader["last_failover_seconds"] < 10
    table = _cli(server=group.namesrv.address)
    assert table[0].split()[:4] == ["GROUP", "ID", "ADDRESS", "ROLE"]
    assert len(table) == 3


def _cli(*args: str, server: str) -> list[str]:
    command = [sys.executable, "-m", "pocketmq", "cluster", "list", "--server", server, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


async def _is(broker: BrokerProcess, role: str) -> bool:
    return await _role(broker.address) == role


class DirectWriter:
    """Sends straight to one broker (no routing) and records when each write was acknowledged."""

    def __init__(self, address: str, tag: str) -> None:
        self.address = address
        self.tag = tag
        self.acked: list[tuple[float, bytes, int]] = []
        self.refused: list[str] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with Admin(servers=self.address) as admin:
            number = 0
            while not self._stop.is_set():
                body = f"{self.tag}{number}".encode()
                number += 1
                request = w.SendRequest([w.InboundMessage("T", body)])
                try:
                    reply = await admin._call(
                        self.address, RequestCode.SEND, request, w.SendResponse
                    )
                except PocketMQError as exc:
                    self.refused.append(str(exc))
                else:
                    item = reply.results[0]
                    if item.code in (Code.SUCCESS, Code.SLAVE_NOT_AVAILABLE):
                        self.acked.append((time.monotonic(), body, item.code))
                    else:
                        self.refused.append(item.remark)
                await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


async def test_a_master_cut_off_from_etcd_stops_writing_before_another_becomes_master(
    etcd: Any, make_group: Any, link_proxy: Any
) -> None:
    """The master reaches etcd through a proxy that the test freezes; its clients and its slave
    still reach it. It refuses writes before the slave is elected: every acknowledgement of
    the old master comes before the first of the new one, and the OK ones are all kept."""
    proxy = link_proxy(etcd.address)
    group = make_group("sync", slaves=0, controller=f"etcd://{proxy.address}")
    master = group.master
    slave = group.add_slave(controller=etcd.url)
    await setup_topic(master.address)
    await caught_up(master, slave)
    await _wait_in_sync(master, 2)
    old, new = DirectWriter(master.address, "old"), DirectWriter(slave.address, "new")
    old.start()
    new.start()
    try:
        await eventually(lambda: len(old.acked) > 20, timeout=20)
        proxy.pause()  # the master's etcd connection goes silent
        await eventually(lambda: _is(slave, "master"), timeout=30)
        await eventually(lambda: len(new.acked) > 20, timeout=20)
    finally:
        await old.stop()
        await new.stop()
    last_old = max(at for at, _, _ in old.acked)
    first_new = min(at for at, _, _ in new.acked)
    assert last_old < first_new, "two masters acknowledged writes at the same time"
    print(f"gap between the two masters' writes: {first_new - last_old:.2f} s")
    assert any("controller" in reason for reason in old.refused), old.refused[-3:]
    stored = set(await stored_bodies(slave.address))
    kept = {body for _, body, code in old.acked if code == Code.SUCCESS}
    assert kept <= stored, f"{len(kept - stored)} acknowledged messages lost"
    # etcd reachable again: the old master learns it was replaced and follows
    proxy.resume()
    await eventually(lambda: _is(master, "slave"), timeout=30)
    assert len(await _masters(group.members)) == 1


async def test_with_etcd_down_the_master_keeps_serving_and_nobody_is_elected(
    etcd: Any, make_group: Any
) -> None:
    group = make_group("sync", controller=etcd.url)
    master, slave = group.master, group.slaves[0]
    await setup_topic(master.address)
    await caught_up(master, slave)
    await _wait_in_sync(master, 2)
    epoch = (await status(master.address))["epoch"]
    writer = DirectWriter(master.address, "w")
    writer.start()
    try:
        etcd.stop()
        stopped_at = time.monotonic()
        await eventually(lambda: _controller_state(master, "serving-without-etcd"), timeout=20)
        await asyncio.sleep(max(0.0, stopped_at + 9 - time.monotonic()))  # > 1 lease
        during = [at for at, _, _ in writer.acked if at > stopped_at]
        assert await _is(slave, "slave")
        etcd.start()
        await eventually(lambda: _controller_state(master, "master"), timeout=30)
    finally:
        await writer.stop()
    # writes went on the whole time: no gap longer than a second while etcd was down
    times = [stopped_at, *sorted(during)]
    longest = max(b - a for a, b in itertools.pairwise(times))
    assert longest < 1.0, f"writes paused for {longest:.1f} s while etcd was down"
    assert len(during) > 100
    assert (await status(master.address))["epoch"] == epoch  # no failover happened
    assert await _is(slave, "slave")


async def _controller_state(broker: BrokerProcess, state: str) -> bool:
    try:
        return (await status(broker.address))["controller"].get("state") == state
    except PocketMQError:
        return False


@pytest.mark.parametrize(
    "events", [6, pytest.param(50, marks=[pytest.mark.slow, pytest.mark.timeout(900)])]
)
async def test_random_kills_and_restarts_leave_one_master_and_every_acknowledged_message(
    etcd: Any, make_group: Any, events: int
) -> None:
    """Kill a random member, restart it after a random pause, ``events`` times, under
    traffic; at the end the group has one master that holds every message acknowledged OK."""
    rng = random.Random(1729)
    group = make_group("sync", slaves=2, controller=etcd.url)
    members = group.members
    await setup_topic(group.master.address)
    await _wait_in_sync(group.master, 3)
    traffic = Traffic(group.namesrv.address)
    traffic.start()
    try:
        for _ in range(events):
            victim = rng.choice(members)
            victim.kill()
            await asyncio.sleep(rng.uniform(0.0, 3.0))
            victim.restart()
        master = await _wait_for_master(members, timeout=40)
        before = len(traffic.acked)
        await eventually(lambda: len(traffic.acked) > before + 20, timeout=30)
    finally:
        await traffic.stop()
    master = await _wait_for_master(members, timeout=30)
    stored = set(await stored_bodies(master.address))
    lost = traffic.confirmed() - stored
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
