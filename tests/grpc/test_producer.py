"""The official Producer: sync and async sends, FIFO placement, delay (and its recall)."""

from __future__ import annotations

import time

import pytest
from rocketmq.v5.exception import IllegalArgumentException

from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.testing import BrokerProcess

from .conftest import OfficialClients, message, unique, wait_until


def _native_receive(broker: BrokerProcess, group: str, topic: str, count: int) -> list:
    consumer = SyncSimpleConsumer(group, topic, servers=broker.native, await_duration=1)
    got: list = []
    try:
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            batch = consumer.receive(32, 30)
            consumer.ack_many(batch)
            got.extend(batch)
    finally:
        consumer.close()
    return got


def test_sync_send_returns_the_client_message_id(
    official: OfficialClients, broker: BrokerProcess, topic: str, group: str
) -> None:
    producer = official.producer(topic)
    receipts = [
        producer.send(
            message(
                topic,
                f"order-{i}".encode(),
                tag="created",
                keys=f"order-{i}",
                properties={"region": "eu"},
            )
        )
        for i in range(5)
    ]
    ids = [r.message_id for r in receipts]
    assert len(set(ids)) == 5
    assert all(len(i) == 34 and i.startswith("01") for i in ids)  # the client's own ids
    got = _native_receive(broker, group, topic, 5)
    assert sorted(m.message_id for m in got) == sorted(ids)
    first = next(m for m in got if m.message_id == ids[0])
    assert first.body == b"order-0"
    assert first.tag == "created"
    assert first.keys == ("order-0",)
    assert dict(first.properties) == {"region": "eu"}
    assert first.born_timestamp > 0


def test_send_async_with_many_in_flight(
    official: OfficialClients, admin: SyncAdmin, topic: str
) -> None:
    producer = official.producer(topic)
    futures = [producer.send_async(message(topic, f"m{i}".encode())) for i in range(300)]
    receipts = [f.result(timeout=30) for f in futures]
    assert len({r.message_id for r in receipts}) == 300
    stored = sum(q.max_offset for q in admin.queues(topic))
    assert stored == 300
    assert len({q.queue_id for q in admin.queues(topic) if q.max_offset}) == 4  # spread


def test_fifo_groups_keep_their_queue_and_order(
    official: OfficialClients, admin: SyncAdmin, broker: BrokerProcess, group: str
) -> None:
    topic = unique("fifo")
    admin.create_topic(topic, queues=4, topic_type="fifo")
    producer = official.producer(topic)
    for i in range(20):
        producer.send(message(topic, f"{i % 4}:{i}".encode(), message_group=f"g{i % 4}"))
    got = _native_receive(broker, group, topic, 20)
    assert len(got) == 20
    by_group: dict[str, list] = {}
    for m in got:
        by_group.setdefault(m.message_group, []).append(m)
    assert sorted(by_group) == ["g0", "g1", "g2", "g3"]
    for members in by_group.values():
        assert len({m.queue_id for m in members}) == 1  # a group stays on one queue
        in_queue_order = sorted(members, key=lambda m: m.queue_offset)
        sequence = [int(m.body.split(b":")[1]) for m in in_queue_order]
        assert sequence == sorted(sequence)  # and in send order


def test_a_typed_topic_takes_only_its_own_message_type(
    official: OfficialClients, admin: SyncAdmin
) -> None:
    """The route lists what each queue accepts; the client checks it before sending (a normal
    topic takes every type: docs/semantics.md, "Messages")."""
    delay_topic = unique("delay")
    admin.create_topic(delay_topic, queues=2, topic_type="delay")
    producer = official.producer(delay_topic)
    with pytest.raises(IllegalArgumentException, match="accept message types"):
        producer.send(message(delay_topic, b"x", message_group="g"))


def test_delay_message_arrives_when_due(
    official: OfficialClients, broker: BrokerProcess, topic: str, group: str
) -> None:
    producer = official.producer(topic)
    consumer = official.simple(group, topic)
    sent_at = time.time()
    # epoch *seconds*: what the Python client really sends (its docstring says ms)
    receipt = producer.send(message(topic, b"later", delivery_timestamp=int(sent_at) + 2))
    assert receipt.recall_handle
    assert consumer.receive(16, 30) == []  # not yet (a 1 s long poll)
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(16, 30)) or bool(got), timeout=10)
    assert time.time() >= int(sent_at) + 2 - 0.1
    assert [m.body for m in got] == [b"later"]
    assert got[0].message_id == receipt.message_id
    consumer.ack(got[0])


def test_a_delivery_time_in_milliseconds_is_understood(
    official: OfficialClients, topic: str, group: str
) -> None:
    """The client's docstring says ms and it sends the value as seconds: the broker reads a
    seconds field that large as milliseconds instead of refusing it."""
    producer = official.producer(topic)
    consumer = official.simple(group, topic)
    producer.send(message(topic, b"ms", delivery_timestamp=int(time.time() * 1000) + 1500))
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(16, 30)) or bool(got), timeout=10)
    assert [m.body for m in got] == [b"ms"]
    consumer.ack(got[0])


def test_recall_cancels_a_delayed_message(
    official: OfficialClients, topic: str, group: str
) -> None:
    producer = official.producer(topic)
    consumer = official.simple(group, topic)
    receipt = producer.send(message(topic, b"cancel me", delivery_timestamp=int(time.time()) + 2))
    keep = producer.send(message(topic, b"keep me", delivery_timestamp=int(time.time()) + 2))
    assert producer.recall_message(topic, receipt.recall_handle) == receipt.message_id
    with pytest.raises(Exception, match="already delivered or recalled"):
        producer.recall_message(topic, receipt.recall_handle)
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(16, 30)) or bool(got), timeout=10)
    assert [m.message_id for m in got] == [keep.message_id]
    consumer.ack(got[0])
    time.sleep(0.5)
    assert consumer.receive(16, 30) == []
