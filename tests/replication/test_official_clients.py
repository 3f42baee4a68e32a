"""The official RocketMQ 5 Python client against a replicated group: what it was told was sent
survives the master's loss (docs/replication.md §3, §6)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pocketmq.client.sync import SyncAdmin

from ..grpc.conftest import CollectingListener, OfficialClients, message
from ..integration.conftest import eventually
from .conftest import status

pytestmark = pytest.mark.integration


def stored(address: str, topic: str, queues: int) -> set[bytes]:
    found: set[bytes] = set()
    with SyncAdmin(servers=address) as admin:
        for queue_id in range(queues):
            offset = 0
            while page := admin.run(
                lambda a, q=queue_id, o=offset: a.browse(
                    topic, address=address, queue_id=q, offset=o, max_count=512
                )
            ):
                found |= {m.body for m in page}
                offset = page[-1].queue_offset + 1
    return found


def test_official_producer_acknowledgements_survive_a_killed_master(make_group: Any) -> None:
    group = make_group("sync", grpc=True)
    master, slave = group.master, group.slaves[0]
    with SyncAdmin(servers=master.address) as admin:
        admin.create_topic("T", queues=4)
    clients = OfficialClients(slave.grpc)  # the access point that outlives the master
    acked: set[bytes] = set()
    failed = 0
    try:
        producer = clients.producer("T")
        number = 0

        def send_for(seconds: float) -> None:
            nonlocal number, failed
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                body = f"o{number}".encode()
                number += 1
                try:
                    producer.send(message("T", body))
                except Exception:  # the client's own error types: counted, not judged
                    failed += 1
                    time.sleep(0.05)
                    continue
                acked.add(body)

        send_for(1.5)
        before_kill = len(acked)
        assert before_kill > 20
        master.kill()
        send_for(0.5)  # sends to a dead master: they fail, none is acknowledged falsely
        with SyncAdmin(servers=slave.address) as admin:
            assert admin.run(lambda a: a.promote()).epoch == 2
        send_for(2.0)
    finally:
        clients.shutdown_all()
    lost = acked - stored(slave.address, "T", 4)
    assert not lost, f"{len(lost)} acknowledged messages lost: {sorted(lost)[:5]}"
    assert failed > 0  # the kill was felt


def test_official_producer_carries_on_after_an_automatic_failover(
    etcd: Any, make_group: Any
) -> None:
    """With ``--controller``, nobody runs a promotion: the official producer, never restarted and
    connected to the slave's endpoint, sends again once the slave is elected (the slave keeps its
    masterless group's queues writable in the routes it gives out); every send it was told
    succeeded is on the new master, and an official push consumer running all along receives
    every one of them."""
    group = make_group("sync", grpc=True, controller=etcd.url)
    master, slave = group.master, group.slaves[0]
    with SyncAdmin(servers=master.address) as admin:
        admin.create_topic("T", queues=4)
        admin.create_group("watchers")
    asyncio.run(eventually(lambda: _in_sync_set_of(master, 2), timeout=30))
    clients = OfficialClients(slave.grpc)
    acked: list[tuple[float, bytes]] = []
    listener = CollectingListener()
    try:
        clients.push("watchers", "T", listener)  # an official consumer through the failover too
        producer = clients.producer("T")
        started = time.monotonic()
        number = 0
        while len(acked) < 30 and time.monotonic() < started + 20:
            body = f"o{number}".encode()
            number += 1
            producer.send(message("T", body))
            acked.append((time.monotonic(), body))
        # the client 5.1.2 refreshes its routes 10 s after it starts, then every 30 s: kill the
        # master 5 s in, so that refresh falls in the seconds without a master (the case the
        # slave's writable route is for) and the next one would come too late for the deadline
        time.sleep(max(0.0, started + 5 - time.monotonic()))
        master.kill()
        killed_at = time.monotonic()
        elected_at = rejoined_at = 0.0
        deadline = killed_at + 25
        while time.monotonic() < deadline and not any(at > killed_at for at, _ in acked[-20:]):
            if not elected_at and asyncio.run(_role_is(slave, "master")):
                elected_at = time.monotonic()
                # SYNC: the new master answers OK once a slave is in sync again; the old master
                # comes back as that slave
                master.restart()
                rejoined_at = time.monotonic()
            body = f"o{number}".encode()
            number += 1
            try:
                producer.send(message("T", body))
            except Exception:  # the client's own error types while the group has no master
                time.sleep(0.2)
                continue
            acked.append((time.monotonic(), body))
        sent = {body for _, body in acked}
        deadline = time.monotonic() + 60
        while not sent <= set(listener.bodies()) and time.monotonic() < deadline:
            time.sleep(0.2)
        missing = sent - set(listener.bodies())
    finally:
        clients.shutdown_all()
    assert elected_at, "the slave was not elected"
    assert not missing, f"the official push consumer never received {len(missing)} messages"
    resumed = [at for at, _ in acked if at > killed_at]
    assert resumed, "the official producer never sent again after the failover"
    print(
        f"slave elected {elected_at - killed_at:.1f} s after the kill; the old master rejoined "
        f"{rejoined_at - killed_at:.1f} s; the official producer's first OK "
        f"{resumed[0] - killed_at:.1f} s after the kill"
    )
    lost = {body for _, body in acked} - stored(slave.address, "T", 4)
    assert not lost, f"{len(lost)} acknowledged messages lost: {sorted(lost)[:5]}"


async def _in_sync_set_of(master: Any, size: int) -> bool:
    """Whether etcd's in-sync set of ``master``'s epoch has ``size`` members (electable)."""
    return len((await status(master.address))["controller"].get("isr", [])) >= size


async def _role_is(broker: Any, role: str) -> bool:
    try:
        return (await status(broker.address))["role"] == role
    except Exception:  # the broker is down or starting
        return False
