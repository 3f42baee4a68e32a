"""The official RocketMQ 5 Python client against a replicated group: what it was told was sent
survives the master's loss (docs/replication.md §3, §6)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pocketmq.client.sync import SyncAdmin

from ..grpc.conftest import OfficialClients, message

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
