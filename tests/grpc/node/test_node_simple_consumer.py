"""The official Node.js SimpleConsumer: receive what pocketmq's SDK sent, ack, change the
invisible duration, and the errors it gets for stale receipt handles."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from rocketmq.grpc_protocol import Code

from pocketmq.client import Message as NativeMessage
from pocketmq.client.sync import SyncProducer
from pocketmq.testing import BrokerProcess

from ..conftest import unique, wait_until
from .conftest import NodeClientError, NodeClients


def _receive_all(node: NodeClients, consumer: int, count: int) -> list[Any]:
    got: list[Any] = []
    wait_until(lambda: got.extend(node.receive(consumer, 32, 30_000)) or len(got) >= count)
    return got


def test_receives_what_pocketmq_sent_and_acks_it(
    node: NodeClients, broker: BrokerProcess, topic: str, group: str
) -> None:
    with SyncProducer(servers=broker.native) as producer:
        sent = [
            producer.send(
                NativeMessage(
                    topic=topic,
                    body=f"native {i}".encode(),
                    tag="native",
                    keys=("k1", "k2"),
                    properties={"origin": "sdk"},
                )
            ).message_id
            for i in range(10)
        ]
    consumer = node.simple(group, topic)
    got = _receive_all(node, consumer, 10)
    assert sorted(m["messageId"] for m in got) == sorted(sent)
    for m in got:
        assert not m["corrupted"]
        assert m["body"].startswith("native ")
        assert (m["tag"], m["keys"], m["properties"]) == ("native", ["k1", "k2"], {"origin": "sdk"})
        assert m["deliveryAttempt"] == 1
        assert m["bornTimestamp"] > 0
        node.driver.call("ack", client=consumer, messageId=m["messageId"])
    assert node.receive(consumer, 32, 30_000) == []  # acked: gone


def test_change_invisible_duration_brings_a_message_back_sooner(
    node: NodeClients, topic: str, group: str
) -> None:
    producer = node.producer(topic)
    sent = node.send(producer, topic, "later")
    consumer = node.simple(group, topic)
    [first] = _receive_all(node, consumer, 1)
    assert first["deliveryAttempt"] == 1
    assert first["bornHost"] == socket.gethostname()  # the client sends its host name
    changed = node.driver.call(
        "changeInvisible", client=consumer, messageId=first["messageId"], invisibleMs=1000
    )
    assert changed["receiptHandle"] not in ("", first["receiptHandle"])
    started = time.monotonic()
    [again] = _receive_all(node, consumer, 1)  # back after 1 s instead of 30 s
    assert 0.5 < time.monotonic() - started < 5
    assert (again["messageId"], again["deliveryAttempt"]) == (sent["messageId"], 2)
    node.driver.call("ack", client=consumer, messageId=again["messageId"])


def test_an_ack_with_a_stale_receipt_handle_is_refused(
    node: NodeClients, topic: str, group: str
) -> None:
    producer = node.producer(topic)
    node.send(producer, topic, "twice")
    consumer = node.simple(group, topic)
    [first] = _receive_all(node, consumer, 1)
    node.driver.call(
        "changeInvisible", client=consumer, messageId=first["messageId"], invisibleMs=300
    )
    [again] = _receive_all(node, consumer, 1)  # redelivered: the first handle is stale now
    with pytest.raises(NodeClientError) as error:
        node.driver.call(
            "ack",
            client=consumer,
            messageId=first["messageId"],
            receiptHandle=first["receiptHandle"],
        )
    assert error.value.code == Code.INVALID_RECEIPT_HANDLE
    node.driver.call("ack", client=consumer, messageId=again["messageId"])
    assert node.receive(consumer, 32, 30_000) == []


def test_a_consumer_of_a_missing_group_fails_to_start_with_the_cause(
    node: NodeClients, topic: str
) -> None:
    started = time.monotonic()
    group = unique("no-such-group")
    with pytest.raises(NodeClientError) as error:
        node.simple(group, topic)
    assert f"response-code={Code.CONSUMER_GROUP_NOT_FOUND}" in error.value.message
    assert f"consumer group {group!r} does not exist" in error.value.message
    assert time.monotonic() - started < 5  # the Settings reply's status ends the wait
    node.expect_logs(
        "Receive unrecognized command from remote",
        "Get error status from telemetry session",
        "Startup the rocketmq client failed",
    )
