"""The official Node.js PushConsumer: concurrent and FIFO consumption, retries, the DLQ."""

from __future__ import annotations

from pocketmq.client.sync import SyncAdmin

from ..conftest import wait_until
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
