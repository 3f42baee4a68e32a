"""The official Node.js Producer: normal, FIFO, delayed (and recalled) and transactional sends,
read back with pocketmq's own SDK (ids, tags, keys, properties and message groups intact)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq.grpc_protocol import Code

from pocketmq.client import MessageView
from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.testing import BrokerProcess

from ..conftest import unique, wait_until
from .conftest import NodeClientError, NodeClients


class Native:
    """pocketmq's own SimpleConsumer, collecting (and acking) everything it receives."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str) -> None:
        self.consumer = SyncSimpleConsumer(group, topic, servers=broker.native, await_duration=0.3)
        self.received: list[MessageView] = []

    def poll(self) -> list[MessageView]:
        batch = self.consumer.receive(32, 30)
        self.consumer.ack_many(batch)
        self.received += batch
        return batch

    def has(self, count: int) -> bool:
        """Poll once; whether ``count`` messages have arrived so far."""
        self.poll()
        return len(self.received) >= count

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.received]


@pytest.fixture
def native(broker: BrokerProcess) -> Iterator[Any]:
    opened: list[Native] = []

    def open_consumer(group: str, topic: str) -> Native:
        consumer = Native(broker, group, topic)
        opened.append(consumer)
        return consumer

    try:
        yield open_consumer
    finally:
        for consumer in opened:
            consumer.consumer.close()


def test_normal_messages_reach_pocketmq_consumers_with_every_field(
    node: NodeClients, native: Any, topic: str, group: str
) -> None:
    producer = node.producer(topic)
    receipt = node.send(
        producer, topic, "hello", tag="created", keys=["order-1", "user-7"], properties={"a": "1"}
    )
    assert len(receipt["messageId"]) == 34  # the client's own id, kept by the broker
    consumer = native(group, topic)
    wait_until(lambda: consumer.has(1))
    [view] = consumer.received
    assert view.message_id == receipt["messageId"]
    assert view.body == b"hello"
    assert (view.tag, view.keys) == ("created", ("order-1", "user-7"))
    assert view.properties == {"a": "1"}


def test_fifo_messages_keep_their_group_and_order(
    node: NodeClients, native: Any, admin: SyncAdmin, group: str
) -> None:
    topic = unique("fifo")
    admin.create_topic(topic, queues=4, topic_type="fifo")
    producer = node.producer(topic)
    for n in range(5):
        for g in ("a", "b"):
            node.send(producer, topic, f"{g}{n}", messageGroup=f"group-{g}")
    consumer = native(group, topic)
    wait_until(lambda: consumer.has(10))
    for g in ("a", "b"):
        mine = [m for m in consumer.received if m.message_group == f"group-{g}"]
        assert [m.body for m in mine] == [f"{g}{n}".encode() for n in range(5)]


def test_delayed_messages_wait_and_a_recalled_one_never_comes(
    node: NodeClients, native: Any, topic: str, group: str
) -> None:
    producer = node.producer(topic)
    consumer = native(group, topic)
    sent_at = time.time()
    kept = node.send(producer, topic, "kept", delayMs=1500)
    recalled = node.send(producer, topic, "recalled", delayMs=1500)
    assert kept["recallHandle"]
    answer = node.driver.call(
        "recall", client=producer, topic=topic, recallHandle=recalled["recallHandle"]
    )
    assert answer["messageId"] == recalled["messageId"]
    assert consumer.poll() == [] or time.time() - sent_at >= 1.5  # not due yet
    wait_until(lambda: consumer.has(1), timeout=10)
    assert time.time() - sent_at >= 1.4
    time.sleep(0.5)
    consumer.poll()
    assert consumer.bodies() == [b"kept"]
    with pytest.raises(NodeClientError, match=f"code: {Code.NOT_FOUND}"):  # recalled already
        node.driver.call(
            "recall", client=producer, topic=topic, recallHandle=recalled["recallHandle"]
        )


def test_transactions_commit_roll_back_and_are_checked_back(
    node: NodeClients, native: Any, admin: SyncAdmin, group: str
) -> None:
    topic = unique("tx")
    admin.create_topic(topic, queues=2, topic_type="transaction")
    producer = node.producer(topic, checker="COMMIT")
    committed = node.send(producer, topic, "committed", transaction="commit")
    assert committed["transactionId"]
    node.send(producer, topic, "rolled back", transaction="rollback")
    # never ended by the producer: the broker asks its checker (0.5 s), which commits
    orphan = node.send(producer, topic, "orphan", transaction="open")
    consumer = native(group, topic)
    wait_until(lambda: consumer.has(2), timeout=15)
    assert sorted(consumer.bodies()) == [b"committed", b"orphan"]
    checks = node.driver.call("checks", client=producer)["checks"]
    assert [c["messageId"] for c in checks] == [orphan["messageId"]]
    assert checks[0]["body"] == "orphan"
    time.sleep(0.7)  # a rolled-back message never shows up
    consumer.poll()
    assert sorted(consumer.bodies()) == [b"committed", b"orphan"]


def test_a_send_to_a_missing_topic_is_topic_not_found(node: NodeClients, topic: str) -> None:
    producer = node.producer(topic)
    with pytest.raises(NodeClientError) as error:
        node.send(producer, unique("missing"), "lost")
    assert error.value.code == Code.TOPIC_NOT_FOUND
    node.expect_logs(r"Exception raised while|Failed to")
