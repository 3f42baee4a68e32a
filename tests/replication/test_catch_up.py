"""A slave started empty beside a master that holds a large log catches up, and answers as the
master does: the same log, queues, index lookups, retry and dead-letter topics
(docs/replication.md §2)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

from ..integration.conftest import eventually
from .conftest import commit_log, status
from .test_group import caught_up

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


async def fill(servers: str, total_bytes: int) -> list[str]:
    """``total_bytes`` of 32 KiB messages in 1 MiB batches; every 64th batch carries a key."""
    body = b"q" * (32 * 1024)
    keys: list[str] = []
    async with Producer(servers=servers) as producer:
        for batch_number in range(total_bytes // MIB):
            key = f"k{batch_number}" if batch_number % 64 == 0 else ""
            if key:
                keys.append(key)
            batch = [
                Message(topic="BIG", body=body, keys=(key,) if key and i == 0 else ())
                for i in range(32)
            ]
            await producer.send_batch(batch)
    return keys


async def make_dead_letters(servers: str, address: str) -> None:
    """Ten messages no consumer accepts: retried once, then dead-lettered."""
    async with Admin(servers=address) as admin:
        await admin.create_topic("F", queues=1)
        await admin.create_group("failing", max_retries=1, retry_delays=[0.2])
    async with Producer(servers=servers) as producer:
        for i in range(10):
            await producer.send(Message(topic="F", body=f"f{i}".encode()))

    def refuse(messages: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.RECONSUME_LATER

    async with PushConsumer("failing", "F", refuse, servers=servers):
        await eventually(lambda: _dlq_full(address), timeout=30)


async def _dlq_full(address: str) -> bool:
    return sum(q[2] - q[1] for q in await queue_rows(address, "%DLQ%failing")) == 10


async def queue_rows(address: str, topic: str) -> list[tuple[int, int, int]]:
    async with Admin(servers=address) as admin:
        try:
            reply = await admin._call(
                address,
                RequestCode.QUEUE_STATUS,
                w.QueueStatusRequest(topic),
                w.QueueStatusResponse,
            )
        except Exception:
            return []
    return [(q.queue_id, q.min_offset, q.max_offset) for q in reply.queues]


async def lookup(address: str, request: w.QueryMessageRequest) -> list[str]:
    async with Admin(servers=address) as admin:
        found = await admin._query_pages(address, request)
    return sorted(m.message_id for m in found)


@pytest.mark.parametrize(
    "size_mib",
    [
        # the short version: 2 x 128 MiB on disk (CI machines may have little room)
        128,
        # the full gibibyte (~15 s here, 2 GiB of disk while it runs): make test-slow
        pytest.param(1024, marks=pytest.mark.slow),
    ],
)
async def test_an_empty_slave_catches_up_and_answers_as_the_master(
    make_group: Any, size_mib: int
) -> None:
    group = make_group("async", slaves=0)
    master = group.master
    async with Admin(servers=master.address) as admin:
        await admin.create_topic("BIG", queues=4)
    keys = await fill(group.namesrv.address, size_mib * MIB)
    await make_dead_letters(group.namesrv.address, master.address)
    end = (await status(master.address))["log_end"]
    started = time.monotonic()
    slave = group.add_slave()
    await caught_up(master, slave)
    seconds = time.monotonic() - started
    print(f"catch-up of {end / MIB:.0f} MiB: {seconds:.1f} s, {end / MIB / seconds:.0f} MiB/s")
    assert commit_log(slave, end) == commit_log(master, end)
    await asyncio.sleep(0.5)  # the state files
    for topic in ("BIG", "F", "%RETRY%failing", "%DLQ%failing"):
        assert await queue_rows(slave.address, topic) == await queue_rows(master.address, topic)
    for key in keys:
        request = w.QueryMessageRequest(topic="BIG", key=key, max_count=8)
        assert await lookup(slave.address, request) == await lookup(master.address, request)
    [one] = await lookup(master.address, w.QueryMessageRequest(topic="BIG", key=keys[-1]))
    by_id = w.QueryMessageRequest(message_id=one)
    assert await lookup(slave.address, by_id) == [one]
