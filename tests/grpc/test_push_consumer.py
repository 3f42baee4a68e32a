"""The official PushConsumer: settings from the group, acks, and retries ending in the DLQ."""

from __future__ import annotations

import itertools
import time

from pocketmq.client.sync import SyncAdmin

from .conftest import CollectingListener, OfficialClients, message, unique, wait_until


def test_push_consumer_consumes_and_commits(
    official: OfficialClients, admin: SyncAdmin, topic: str, group: str
) -> None:
    listener = CollectingListener()
    official.push(group, topic, listener)
    producer = official.producer(topic)
    sent = {producer.send(message(topic, f"p{i}".encode())).message_id for i in range(30)}
    wait_until(lambda: len(listener.deliveries) >= 30, timeout=15)
    assert {m.message_id for _, m in listener.deliveries} == sent
    assert all(m.delivery_attempt == 1 for _, m in listener.deliveries)
    wait_until(lambda: sum(q.committed_offset for q in admin.queues(topic, group)) == 30)
    time.sleep(0.3)
    assert len(listener.deliveries) == 30  # acked: nothing comes back


def test_failures_are_retried_on_the_group_schedule_then_dead_lettered(
    official: OfficialClients, admin: SyncAdmin, topic: str
) -> None:
    group = unique("dlq-group")
    admin.create_group(group, max_retries=2, retry_delays=[1, 1])  # 3 attempts, 1 s apart
    listener = CollectingListener(fail=lambda m: m.body == b"poison")
    official.push(group, topic, listener)
    producer = official.producer(topic)
    poison = producer.send(message(topic, b"poison")).message_id
    producer.send(message(topic, b"fine"))

    def attempts() -> list[tuple[float, int]]:
        return [(t, m.delivery_attempt) for t, m in listener.deliveries if m.body == b"poison"]

    wait_until(lambda: len(attempts()) >= 3, timeout=20)
    seen = attempts()
    assert [a for _, a in seen] == [1, 2, 3]
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(seen)]
    assert all(0.7 < gap < 4 for gap in gaps), gaps  # the group's 1 s retry delays

    def dead_letters() -> list:
        copies = admin.run(lambda a: a.query_message(poison))
        return [c for c in copies if c.topic == f"%DLQ%{group}"]

    wait_until(lambda: bool(dead_letters()), timeout=10)
    [dead] = dead_letters()
    assert dead.body == b"poison"
    assert dead.message_id == poison
    time.sleep(1.5)
    assert len(attempts()) == 3  # never delivered again
    assert listener.bodies().count(b"fine") == 1
