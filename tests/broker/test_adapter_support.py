"""Broker-core operations the gRPC adapter needs: forward a popped message to the DLQ, recall a
delayed message, look up a group, wake long polls, pop from every queue (docs/grpc.md,
"Choices")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage, dlq_topic
from pocketmq.errors import (
    Code,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    MessageNotFoundError,
)


def _config(path: Path) -> BrokerConfig:
    return BrokerConfig(data_dir=str(path), state_persist_interval=0.05)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(_config(tmp_path))
    await broker.start()
    broker.create_topic("T", queues=2)
    broker.create_group(GroupConfig(name="G"))
    yield broker
    await broker.close()


def _message(body: bytes, **properties: str) -> InboundMessage:
    return InboundMessage("T", body, properties)


def _dlq(broker: Broker, group: str) -> list[bytes]:
    topic = dlq_topic(group)
    if broker.topics.get(topic) is None:
        return []
    got = broker.store.get_messages(topic, 0, 0, max_count=100)
    return [m.body for m in got.messages]


async def test_forward_to_dead_letter_moves_the_message_and_commits(broker: Broker) -> None:
    [outcome] = await broker.send([_message(b"poison")])
    assert outcome.code is Code.SUCCESS
    [delivered] = await broker.pop("G", "T", invisible=30)
    broker.forward_to_dead_letter("G", "T", delivered.receipt_handle)
    assert _dlq(broker, "G") == [b"poison"]
    dead = broker.store.get_messages(dlq_topic("G"), 0, 0, max_count=1).messages[0]
    assert dead.properties["DLQ_REASON"] == "forwarded to the DLQ by the consumer"
    assert dead.properties[props.RETRY_TOPIC] == "T"
    assert broker.query_offset("G", "T", delivered.queue_id) == delivered.queue_offset + 1
    with pytest.raises(InvalidReceiptHandleError):  # the handle is spent
        broker.ack("G", "T", delivered.receipt_handle)
    assert await broker.pop("G", "T", invisible=30) == []


async def test_forward_to_dead_letter_rejects_bad_handles(broker: Broker) -> None:
    await broker.send([_message(b"x")])
    [delivered] = await broker.pop("G", "T", invisible=30)
    stale = delivered.receipt_handle
    broker.change_invisible("G", "T", stale, 30)  # a new token: the old handle is stale
    with pytest.raises(InvalidReceiptHandleError):
        broker.forward_to_dead_letter("G", "T", stale)
    with pytest.raises(InvalidReceiptHandleError):
        broker.forward_to_dead_letter("G", "T", "not-a-handle")
    with pytest.raises(GroupNotFoundError):
        broker.forward_to_dead_letter("nobody", "T", stale)
    assert _dlq(broker, "G") == []


async def test_recall_cancels_a_delayed_message(broker: Broker) -> None:
    due = int((time.time() + 0.4) * 1000)
    [outcome] = await broker.send([_message(b"later", **{props.DELIVER_TIME_MS: str(due)})])
    [kept] = await broker.send([_message(b"kept", **{props.DELIVER_TIME_MS: str(due)})])
    assert outcome.recall_handle
    assert kept.recall_handle
    assert broker.recall("T", outcome.recall_handle) == outcome.message_id
    with pytest.raises(MessageNotFoundError):  # only once
        broker.recall("T", outcome.recall_handle)
    got = await broker.pop("G", "T", invisible=30, max_wait=3)
    assert [m.body for m in got] == [b"kept"]
    await asyncio.sleep(0.2)
    assert await broker.pop("G", "T", invisible=30) == []
    with pytest.raises(MessageNotFoundError):  # delivered: too late
        broker.recall("T", kept.recall_handle)


async def test_recall_validates_the_handle(broker: Broker) -> None:
    due = int((time.time() + 60) * 1000)
    [outcome] = await broker.send([_message(b"later", **{props.DELIVER_TIME_MS: str(due)})])
    [plain] = await broker.send([_message(b"now")])
    assert plain.recall_handle == ""
    with pytest.raises(InvalidArgumentError):
        broker.recall("T", "garbage")
    with pytest.raises(MessageNotFoundError):  # another topic
        broker.recall("OTHER", outcome.recall_handle)
    physical = outcome.recall_handle.split(":")[1]
    with pytest.raises(MessageNotFoundError):  # right place, wrong id
        broker.recall("T", f"R1:{physical}:0123")
    with pytest.raises(MessageNotFoundError):  # not a held message
        broker.recall("T", f"R1:{plain.physical_offset}:{plain.message_id}")


async def test_a_recall_survives_a_restart(tmp_path: Path) -> None:
    broker = Broker(_config(tmp_path))
    await broker.start()
    broker.create_topic("T", queues=1)
    broker.create_group(GroupConfig(name="G"))
    due = int((time.time() + 0.6) * 1000)
    [outcome] = await broker.send([_message(b"later", **{props.DELIVER_TIME_MS: str(due)})])
    broker.recall("T", outcome.recall_handle)
    await broker.close()
    broker = Broker(_config(tmp_path))
    await broker.start()
    try:
        assert await broker.pop("G", "T", invisible=30, max_wait=1.2) == []
    finally:
        await broker.close()


async def test_require_group(broker: Broker) -> None:
    assert broker.require_group("G").name == "G"
    with pytest.raises(GroupNotFoundError):
        broker.require_group("missing")


async def test_a_shorter_invisible_time_wakes_a_sleeping_long_poll(broker: Broker) -> None:
    """A consumer nacks (change-invisible to 0.3 s) while another long-polls: the poll must
    see the message at its new visible time, not when the old invisible time ends."""
    await broker.send([_message(b"retry me")])
    [first] = await broker.pop("G", "T", invisible=60)
    poll = asyncio.create_task(broker.pop("G", "T", invisible=60, max_wait=5))
    await asyncio.sleep(0.1)  # the poll is asleep, until the old invisible time at the latest
    started = time.monotonic()
    broker.change_invisible("G", "T", first.receipt_handle, 0.3)
    [again] = await asyncio.wait_for(poll, 3)
    assert again.body == b"retry me"
    assert again.delivery_attempt == 2
    assert time.monotonic() - started < 1.5


async def test_one_pop_visits_every_queue_from_the_hint(tmp_path: Path) -> None:
    """The gRPC adapter passes the client's (random) queue as a hint: a pop starting there
    must still visit every queue, also the first time a queue is popped."""
    broker = Broker(_config(tmp_path))
    await broker.start()
    try:
        broker.create_topic("Q", queues=4)
        broker.create_group(GroupConfig(name="G"))
        await broker.send([InboundMessage("Q", b"m", {}, q) for q in range(4) for _ in range(3)])
        got = await broker.pop("G", "Q", max_count=32, invisible=30, queue_hint=2)
        assert sorted(m.queue_id for m in got) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
        assert got[0].queue_id == 2
    finally:
        await broker.close()
