"""Bad input is refused with the right v2 status, and the broker keeps serving.

The official client checks some input itself (empty body; body size against the broker's
``publishing.max_body_size``; message type against the route's accepted types), so each case is
also sent raw, as another client could, to check the broker's own answer.
"""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.v5.exception import (
    BadRequestException,
    IllegalArgumentException,
    NotFoundException,
)

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

from .conftest import MAX_MESSAGE_SIZE, ClientLog, OfficialClients, message, unique, wait_until


def _send(stub, topic: str, body: bytes, **system) -> service_pb2.SendMessageResponse:
    system.setdefault("message_id", "01" + unique("id").replace("-", "").upper()[:32])
    system.setdefault("message_type", definition_pb2.MessageType.NORMAL)
    system.setdefault("body_encoding", definition_pb2.Encoding.IDENTITY)
    request = service_pb2.SendMessageRequest(
        messages=[
            definition_pb2.Message(
                topic=definition_pb2.Resource(name=topic),
                body=body,
                system_properties=definition_pb2.SystemProperties(**system),
            )
        ]
    )
    return stub.SendMessage(request, timeout=5)


def test_oversize_body(official: OfficialClients, client_log: ClientLog, stub, topic: str) -> None:
    client_log.expect("Message body size exceeds the threshold")
    producer = official.producer(topic)
    with pytest.raises(IllegalArgumentException, match=f"max size={MAX_MESSAGE_SIZE}"):
        producer.send(message(topic, b"x" * (MAX_MESSAGE_SIZE + 1)))  # refused by the client
    raw = _send(stub, topic, b"x" * (MAX_MESSAGE_SIZE + 1))
    assert raw.status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert raw.entries[0].status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert producer.send(message(topic, b"x" * MAX_MESSAGE_SIZE)).message_id  # the limit fits


def test_empty_body(stub, topic: str) -> None:
    with pytest.raises(IllegalArgumentException, match="blank"):
        message(topic, b"")  # the client refuses to build it
    assert _send(stub, topic, b"").status.code == Code.MESSAGE_BODY_EMPTY


def test_unknown_topic(official: OfficialClients, client_log: ClientLog, stub) -> None:
    client_log.expect("query topic raise exception", "select topic", "send message exception")
    missing = unique("missing")
    producer = official.producer()
    with pytest.raises(Exception, match=f"failed to fetch topic:{missing} route"):
        producer.send(message(missing, b"x"))
    route = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=missing)), timeout=5
    )
    assert route.status.code == Code.TOPIC_NOT_FOUND
    assert "pocketmq topic create" in route.status.message
    assert _send(stub, missing, b"x").status.code == Code.TOPIC_NOT_FOUND


def test_unknown_consumer_group(
    official: OfficialClients, client_log: ClientLog, topic: str
) -> None:
    client_log.expect("receive message exception", "CONSUMER_GROUP_NOT_FOUND")
    consumer = official.simple(unique("nobody"), topic)
    with pytest.raises(NotFoundException) as error:
        consumer.receive(1, 10)
    assert error.value.code == Code.CONSUMER_GROUP_NOT_FOUND


def test_reserved_property_and_type_conflicts(
    official: OfficialClients, client_log: ClientLog, stub, topic: str, admin: SyncAdmin
) -> None:
    client_log.expect("send message exception", "failed to send message")
    producer = official.producer(topic)
    with pytest.raises(BadRequestException) as error:
        producer.send(message(topic, b"x", properties={"UNIQ_KEY": "mine"}))
    assert error.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    delay_topic = unique("delay")
    admin.create_topic(delay_topic, queues=2, topic_type="delay")
    fifo = _send(
        stub, delay_topic, b"x", message_type=definition_pb2.MessageType.FIFO, message_group="g"
    )
    assert fifo.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "delay topic" in fifo.status.message
    no_group = _send(stub, topic, b"x", message_type=definition_pb2.MessageType.FIFO)
    assert no_group.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    far = _send(
        stub,
        topic,
        b"x",
        message_type=definition_pb2.MessageType.DELAY,
        delivery_timestamp={"seconds": 4_000_000_000},
    )
    assert far.status.code == Code.ILLEGAL_DELIVERY_TIME


def test_invalid_receipt_handle(stub, topic: str, group: str) -> None:
    reply = stub.AckMessage(
        service_pb2.AckMessageRequest(
            group=definition_pb2.Resource(name=group),
            topic=definition_pb2.Resource(name=topic),
            entries=[service_pb2.AckMessageEntry(message_id="x", receipt_handle="0:0:nothing")],
        ),
        timeout=5,
    )
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
    assert reply.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE


def test_the_broker_keeps_serving_after_bad_input(
    official: OfficialClients, broker: BrokerProcess, stub, topic: str, group: str
) -> None:
    for body in (b"", b"x" * (MAX_MESSAGE_SIZE + 10)):
        assert _send(stub, topic, body).status.code != Code.OK
    garbage = service_pb2.SendMessageRequest(messages=[definition_pb2.Message()])
    assert stub.SendMessage(garbage, timeout=5).status.code == Code.ILLEGAL_TOPIC
    assert broker.running
    producer = official.producer(topic)
    sent = producer.send(message(topic, b"still here")).message_id
    consumer = official.simple(group, topic)
    got: list = []
    wait_until(lambda: got.extend(consumer.receive(8, 30)) or bool(got))
    assert [m.message_id for m in got] == [sent]
    consumer.ack(got[0])
