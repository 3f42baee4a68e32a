"""The order of etcd's in-sync set and a SYNC send's answer (docs/replication.md §9): a slave's
acknowledgement counts only once etcd's ``isr`` names it. Otherwise a send is answered OK on the
word of a slave no election may pick: the master dies, the other slave (in etcd's isr, without
the record) is elected, and an acknowledged message is gone.

One master's controller (:class:`Failover`) against a real etcd, with the replication state of a
real :class:`Replication` and a slave's acknowledgements fed by hand; etcd's write of the isr is
held at a gate, so the window between "the master sees the slave caught up" and "etcd lists it"
is as long as the test wants.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from pocketmq.broker.ha.replication import ReplicaOutcome, Replication, ReplicationMode, Role
from pocketmq.server.ha.etcd import Etcd, parse_controller
from pocketmq.server.ha.failover import ControllerTimings, Failover

from ..broker.test_replication import FakeLog


class GatedEtcd(Etcd):
    """The real etcd client; a write of the group's isr waits at :attr:`gate`."""

    def __init__(self, url: str) -> None:
        super().__init__(parse_controller(url))
        self.gate = asyncio.Event()
        self.gate.set()

    async def swap(self, expect: Any, writes: Any) -> bool:
        if any(key.endswith("/isr") for key in writes):
            await self.gate.wait()
        return await super().swap(expect, writes)


class Group:
    """What the controller asks of the server's group role in this test: nothing happens."""

    controlled = False
    ha_address = "127.0.0.1:1"

    async def announce(self) -> None:
        return None


def master(etcd: Etcd) -> tuple[Failover, Replication, FakeLog]:
    log = FakeLog()
    replication = Replication(
        log,  # type: ignore[arg-type]
        role=Role.MASTER,
        mode=ReplicationMode.SYNC,
        max_gap=1000,
        sync_timeout=0.3,
        wake=lambda queues: None,
    )
    broker = SimpleNamespace(
        name="g1",
        role=Role.MASTER,
        config=SimpleNamespace(broker_id=0),
        ha=SimpleNamespace(
            replication=replication,
            replica_log=SimpleNamespace(current_epoch=lambda: 1, end=0, missing=lambda: None),
        ),
    )
    failover = Failover(
        broker,  # type: ignore[arg-type]
        Group(),  # type: ignore[arg-type]
        etcd,
        own_address=lambda: "127.0.0.1:2",
        timings=ControllerTimings(lease=6, margin=2.0),
    )
    return failover, replication, log


async def isr_in_etcd(etcd: Etcd) -> list[int]:
    value, _ = await etcd.get("/pocketmq/groups/g1/isr")
    assert value is not None
    return [int(member) for member in value["members"]]


async def test_a_slave_counts_for_sync_sends_only_once_etcd_lists_it(etcd: Any) -> None:
    client = GatedEtcd(etcd.url)
    try:
        failover, replication, log = master(client)
        await failover._acquire()  # leads at epoch 1: etcd's isr is the master alone
        assert await isr_in_etcd(client) == [0]
        log.write_position = 500
        client.gate.clear()  # etcd's isr write is slow from here
        replication.slave_connected("s1", 1, "127.0.0.1:3", position=0)
        replication.acked("s1", 500, 500)  # caught up, holds everything
        assert [s.broker_id for s in replication.caught_up_slaves()] == [1]
        writing = asyncio.create_task(failover._write_isr())
        await asyncio.sleep(0.1)  # the write waits at the gate: etcd still says [0]
        assert await isr_in_etcd(client) == [0]
        assert replication.in_sync() == []
        assert await replication.wait(500) is ReplicaOutcome.SLAVE_NOT_AVAILABLE
        client.gate.set()
        await writing
        assert await isr_in_etcd(client) == [0, 1]
        assert [s.broker_id for s in replication.in_sync()] == [1]
        assert await replication.wait(500) is ReplicaOutcome.REPLICATED
    finally:
        await client.close()


async def test_a_slave_falling_behind_stops_counting_before_etcd_drops_it(etcd: Any) -> None:
    client = GatedEtcd(etcd.url)
    try:
        failover, replication, log = master(client)
        await failover._acquire()
        replication.slave_connected("s1", 1, "127.0.0.1:3", position=0)
        await failover._write_isr()
        assert await isr_in_etcd(client) == [0, 1]
        client.gate.clear()
        log.write_position = 5000  # the slave is now 5000 bytes behind: past max_gap
        replication.grew(5000)
        replication.acked("s1", 100, 100)
        assert replication.caught_up_slaves() == []
        assert replication.in_sync() == []  # no longer counted, though etcd still lists it
        assert await replication.wait(5000) is ReplicaOutcome.SLAVE_NOT_AVAILABLE
        client.gate.set()
        await failover._write_isr()
        assert await isr_in_etcd(client) == [0]
    finally:
        await client.close()


async def test_the_master_writes_etcds_isr_when_a_slave_catches_up_not_at_the_renewal(
    etcd: Any,
) -> None:
    """The lease renews every lease / 6 (1 s here); a slave caught up is in etcd's isr sooner."""
    client = GatedEtcd(etcd.url)
    try:
        failover, replication, _ = master(client)
        failover.start()
        for _ in range(100):
            if failover.status()["state"] == "master":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # past the first renewal's isr write
        replication.slave_connected("s1", 1, "127.0.0.1:3", position=0)
        started = asyncio.get_running_loop().time()
        while await isr_in_etcd(client) != [0, 1]:
            assert asyncio.get_running_loop().time() - started < 0.5, "isr written late"
            await asyncio.sleep(0.01)
    finally:
        await failover.close(hand_over=False)
