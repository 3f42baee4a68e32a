"""The official SimpleConsumer: receive, ack, change-invisible, redelivery, filters."""

from __future__ import annotations

import time

import pytest
from rocketmq.grpc_protocol import Code
from rocketmq.v5.exception import BadRequestException

from pocketmq.client import Message as NativeMessage
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.testing import BrokerProcess

from .conftest import OfficialClients, message, wait_until


def _receive_all(consumer, count: int, invisible: int = 30, timeout: float = 10) -> list:
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(32, invisible)) or len(got) >= count, timeout)
    return got


def test_receive_and_ack_everything_once(
    official: OfficialClients, admin: SyncAdmin, topic: str, group: str
) -> None:
    producer = official.producer(topic)
    sent = {producer.send(message(topic, f"m{i}".encode(), tag="t")).message_id for i in range(40)}
    consumer = official.simple(group, topic)
    got = _receive_all(consumer, 40)
    assert {m.message_id for m in got} == sent
    for m in got:
        assert m.delivery_attempt == 1
        assert not m.corrupted  # the body digest matched
        assert m.receipt_handle
        assert m.tag == "t"
        assert m.born_timestamp > 0
        assert m.topic == topic
        consumer.ack(m)
    assert consumer.receive(32, 30) == []
    assert sum(q.committed_offset for q in admin.queues(topic, group)) == 40


def test_a_receive_takes_from_every_queue(
    official: OfficialClients, broker: BrokerProcess, topic: str, group: str
) -> None:
    """The client names one random queue per receive; the broker treats it as a hint."""
    with SyncProducer(servers=broker.native) as producer:
        for queue in range(4):
            for i in range(3):
                producer.send(NativeMessage(topic=topic, body=f"{queue}-{i}".encode()))
    consumer = official.simple(group, topic)
    got = consumer.receive(32, 30)
    assert len(got) == 12  # one receive, all four queues
    for m in got:
        consumer.ack(m)


def test_change_invisible_duration_redelivers_with_a_new_handle(
    official: OfficialClients, topic: str, group: str
) -> None:
    official.producer(topic).send(message(topic, b"slow"))
    consumer = official.simple(group, topic)
    [first] = _receive_all(consumer, 1)
    old_handle = first.receipt_handle
    changed_at = time.monotonic()
    consumer.change_invisible_duration(first, 1)
    assert first.receipt_handle != old_handle  # the client took the new handle
    [again] = _receive_all(consumer, 1)
    assert time.monotonic() - changed_at >= 0.9  # hidden for one more second
    assert again.message_id == first.message_id
    assert again.delivery_attempt == 2
    with pytest.raises(BadRequestException) as stale:  # superseded by the redelivery
        consumer.ack(first)
    assert stale.value.code == Code.INVALID_RECEIPT_HANDLE
    consumer.ack(again)
    assert consumer.receive(32, 30) == []


def test_an_unacked_message_comes_back_after_its_invisible_time(
    official: OfficialClients, topic: str, group: str
) -> None:
    official.producer(topic).send(message(topic, b"forgotten"))
    consumer = official.simple(group, topic)
    [first] = _receive_all(consumer, 1, invisible=1)
    started = time.monotonic()
    [again] = _receive_all(consumer, 1, invisible=30)
    assert time.monotonic() - started < 3
    assert (again.message_id, again.delivery_attempt) == (first.message_id, 2)
    consumer.ack(again)


def test_tag_filter(official: OfficialClients, topic: str, group: str) -> None:
    producer = official.producer(topic)
    for tag in ("a", "b", "c", "a"):
        producer.send(message(topic, tag.encode(), tag=tag))
    consumer = official.simple(group, topic, expression="a || c")
    got = _receive_all(consumer, 3)
    assert sorted(m.body for m in got) == [b"a", b"a", b"c"]
    for m in got:
        consumer.ack(m)
    assert consumer.receive(32, 30) == []
