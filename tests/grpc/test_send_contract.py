"""The broker's send contract seen through the gRPC adapter: each refused message gets the code
RocketMQ's proxy answers for that rule, and only that message of a request is refused. The rules
themselves are the broker's (pocketmq.contract), enforced for the native protocol too
(tests/integration/test_send_contract.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from pocketmq.client.sync import SyncAdmin

from .conftest import unique

d = definition_pb2
s = service_pb2
MT = d.MessageType


def _message(topic: str, body: bytes = b"body", **system: Any) -> Any:
    system.setdefault("message_id", "01" + unique("id").replace("-", "").upper()[:32])
    return d.Message(
        topic=d.Resource(name=topic), body=body, system_properties=d.SystemProperties(**system)
    )


@pytest.mark.parametrize(
    ("topic_type", "body", "system", "code"),
    [
        ("normal", b"", {}, Code.MESSAGE_BODY_EMPTY),
        ("normal", b"x", {"tag": "a||b"}, Code.ILLEGAL_MESSAGE_TAG),
        (
            "normal",
            b"x",
            {"message_type": MT.DELAY, "delivery_timestamp": {"seconds": 4_000_000_000}},
            Code.ILLEGAL_DELIVERY_TIME,
        ),
        ("fifo", b"x", {"message_type": MT.NORMAL}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (
            "delay",
            b"x",
            {"message_type": MT.FIFO, "message_group": "g"},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            "transaction",
            b"x",
            {"message_type": MT.NORMAL},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            "fifo",
            b"x",
            {"message_type": MT.DELAY, "delivery_timestamp": {"seconds": int(time.time()) + 60}},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
    ],
)
def test_a_refused_message_gets_its_rules_code_and_the_others_are_stored(
    stub: Any, admin: SyncAdmin, topic_type: str, body: bytes, system: dict[str, Any], code: int
) -> None:
    topic = unique(topic_type)
    admin.create_topic(topic, queues=2, topic_type=topic_type)
    fine = {
        "normal": {"message_type": MT.NORMAL},
        "fifo": {"message_type": MT.FIFO, "message_group": "g"},
        "transaction": None,  # needs a transaction: the refusal alone is checked
        "delay": None,
    }[topic_type]
    messages = [_message(topic, body, **system)]
    if fine is not None:
        messages.append(_message(topic, b"fine", **fine))
    reply = stub.SendMessage(s.SendMessageRequest(messages=messages), timeout=5)
    codes = [entry.status.code for entry in reply.entries]
    assert codes[0] == code, reply.entries[0].status.message
    if fine is not None:
        assert codes[1] == Code.OK
        assert reply.status.code == Code.MULTIPLE_RESULTS
