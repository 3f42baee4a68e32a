"""Transactions and FIFO through the official client: commit, rollback, check-back, and
per-group order with a failing message (issues 5, 6, 7)."""

from __future__ import annotations

import threading
import time
from typing import Any

from rocketmq import ConsumeResult, MessageListener, TransactionChecker, TransactionResolution

from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.testing import BrokerProcess

from .conftest import OfficialClients, message, unique, wait_until


class Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def check(self, message: Any) -> Any:
        self.asked.append(message.message_id)
        return self.answer


def _received(broker: BrokerProcess, group: str, topic: str, wait: float = 1.0) -> list[bytes]:
    with SyncSimpleConsumer(group, topic, servers=broker.native, await_duration=wait) as consumer:
        out: list[bytes] = []
        while batch := consumer.receive(16):
            out += [m.body for m in batch]
            consumer.ack_many(batch)
        return out


def _tx_topic(admin: SyncAdmin) -> tuple[str, str]:
    topic, group = unique("tx"), unique("txg")
    admin.create_topic(topic, queues=2, topic_type="transaction")
    admin.create_group(group)
    return topic, group


def test_commit_is_delivered_once_and_rollback_never(
    official: OfficialClients, admin: SyncAdmin, broker: BrokerProcess
) -> None:
    topic, group = _tx_topic(admin)
    producer = official.producer(topic, checker=Checker(TransactionResolution.ROLLBACK))
    committed = producer.begin_transaction()
    producer.send(message(topic, b"committed"), committed)
    assert _received(broker, group, topic, wait=0.3) == []  # a half message is invisible
    committed.commit()
    rolled_back = producer.begin_transaction()
    producer.send(message(topic, b"rolled back"), rolled_back)
    rolled_back.rollback()
    assert _received(broker, group, topic) == [b"committed"]


def test_an_unfinished_transaction_is_checked_back_and_committed(
    official: OfficialClients, admin: SyncAdmin, broker: BrokerProcess
) -> None:
    topic, group = _tx_topic(admin)
    checker = Checker(TransactionResolution.COMMIT)
    producer = official.producer(topic, checker=checker)
    transaction = producer.begin_transaction()
    receipt = producer.send(message(topic, b"orphan"), transaction)
    # the producer never ends the transaction: the broker asks its checker after 0.5 s
    wait_until(lambda: bool(checker.asked), timeout=15)
    assert checker.asked[0] == receipt.message_id
    wait_until(lambda: _received(broker, group, topic, wait=0.2) == [b"orphan"], timeout=10)


class OrderedListener(MessageListener):  # type: ignore[misc]
    """Fails the first delivery of one message; records the order of successes per group."""

    def __init__(self, poison_body: bytes) -> None:
        self.poison = poison_body
        self.failed_once = False
        self.successes: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self._lock:
            if message.body == self.poison and not self.failed_once:
                self.failed_once = True
                return ConsumeResult.FAILURE
            self.successes.setdefault(message.message_group, []).append(message.body)
            return ConsumeResult.SUCCESS


def test_fifo_push_consumer_keeps_every_groups_order_through_a_failure(
    official: OfficialClients, admin: SyncAdmin
) -> None:
    topic, group = unique("fifo"), unique("fifog")
    admin.create_topic(topic, queues=2, topic_type="fifo")
    admin.create_group(group, fifo=True, max_retries=5, retry_delays=[1])
    listener = OrderedListener(b"g0-2")
    official.push(group, topic, listener)
    producer = official.producer(topic)
    for n in range(8):
        for g in range(4):
            producer.send(message(topic, f"g{g}-{n}".encode(), message_group=f"g{g}"))
    wait_until(lambda: sum(len(v) for v in listener.successes.values()) >= 32, timeout=30)
    time.sleep(0.3)
    assert listener.failed_once
    for g in range(4):
        assert listener.successes[f"g{g}"] == [f"g{g}-{n}".encode() for n in range(8)]
