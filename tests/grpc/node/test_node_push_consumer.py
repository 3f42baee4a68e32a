"""The official Node.js PushConsumer: concurrent and FIFO consumption, retries, the DLQ."""

from __future__ import annotations

import time
from typing import Any

from pocketmq.client.sync import SyncAdmin

from ..conftest import unique, wait_until
from .conftest import NodeClients


def test_push_consumer_receives_every_message_intact(
    node: NodeClients, admin: SyncAdmin, topic: str, group: str
) -> None:
    # Regression: every message was "corrupted" (the Node.js client verifies a CRC32 digest as a
    # decimal string, others as hex) and went to the DLQ; the broker now sends MD5 digests.
    consumer = node.push(group, topic)
    producer = node.producer(topic)
    sent = {node.send(producer, topic, f"m{i}")["messageId"] for i in range(20)}
    wait_until(lambda: len(node.deliveries(consumer)) >= 20, timeout=15)
    deliveries = node.deliveries(consumer)
    assert {d["messageId"] for d in deliveries} == sent
    assert not any(d["corrupted"] for d in deliveries)
    assert all(d["deliveryAttempt"] == 1 for d in deliveries)
    wait_until(lambda: sum(q.committed_offset for q in admin.queues(topic, group)) == 20)


def _dead_letters(admin: SyncAdmin, message_id: str, group: str) -> list[Any]:
    copies = admin.run(lambda a: a.query_message(message_id))
    return [c for c in copies if c.topic == f"%DLQ%{group}"]


def test_failures_are_retried_then_dead_lettered(
    node: NodeClients, admin: SyncAdmin, topic: str
) -> None:
    group = unique("dlq-group")
    admin.create_group(group, max_retries=2, retry_delays=[1, 1])  # 3 attempts
    # The broker counts the attempts and dead-letters; the Node.js client 1.0.8 ignores the
    # group's (customized) backoff and asks for each retry at once (docs/grpc.md).
    consumer = node.push(group, topic, fail={"bodies": ["poison"]})
    producer = node.producer(topic)
    poison = node.send(producer, topic, "poison")["messageId"]
    node.send(producer, topic, "fine")

    def attempts() -> list[int]:
        return [d["deliveryAttempt"] for d in node.deliveries(consumer) if d["body"] == "poison"]

    wait_until(lambda: len(attempts()) >= 3, timeout=20)
    assert attempts() == [1, 2, 3]
    wait_until(lambda: bool(_dead_letters(admin, poison, group)), timeout=10)
    [dead] = _dead_letters(admin, poison, group)
    assert dead.body == b"poison"
    time.sleep(1)
    assert attempts() == [1, 2, 3]  # never delivered again
    assert [d["body"] for d in node.deliveries(consumer)].count("fine") == 1


def test_fifo_push_consumer_keeps_each_groups_order_and_dead_letters_a_failure(
    node: NodeClients, admin: SyncAdmin
) -> None:
    topic, group = unique("fifo"), unique("fifo-group")
    admin.create_topic(topic, queues=2, topic_type="fifo")
    admin.create_group(group, fifo=True, max_retries=3, retry_delays=[1])
    consumer = node.push(group, topic, fail={"bodies": ["b2"]})
    producer = node.producer(topic)
    sent = {}
    for n in range(6):
        for g in "abc":
            sent[f"{g}{n}"] = node.send(producer, topic, f"{g}{n}", messageGroup=g)["messageId"]
    wait_until(lambda: len(node.deliveries(consumer)) >= 18, timeout=20)
    deliveries = node.deliveries(consumer)
    for g in "abc":
        assert [d["body"] for d in deliveries if d["messageGroup"] == g] == [
            f"{g}{n}" for n in range(6)
        ]
    # The Node.js client 1.0.8 reads no customized backoff (the only kind RocketMQ's proxy and
    # pocketmq send for such a group), so its FIFO consumer allows one attempt and forwards a
    # failed message to the DLQ at once; the group's later messages follow in order.
    [failed] = [d for d in deliveries if d["failed"]]
    assert (failed["body"], failed["deliveryAttempt"]) == ("b2", 1)
    wait_until(lambda: bool(_dead_letters(admin, sent["b2"], group)), timeout=10)
    time.sleep(0.5)
    assert len(node.deliveries(consumer)) == 18
