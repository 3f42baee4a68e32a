"""The JSON bodies of the client-side requests and their answers (docs/remoting.md, "Request
codes"): a heartbeat's producer and consumer registrations, the queues an orderly consumer
locks, a group's consumer ids.

Field names are RocketMQ's (``remoting/.../heartbeat/HeartbeatData.java``, ``ConsumerData``,
``ProducerData``, ``SubscriptionData``, ``common/.../message/MessageQueue.java``,
``body/LockBatchRequestBody.java``, ``UnlockBatchRequestBody``, ``LockBatchResponseBody``,
``header/GetConsumerListByGroupResponseBody.java``). Unknown fields are ignored, as fastjson
ignores them, so newer clients' additions do not break decoding; a body that is not JSON of the
expected shape is a :class:`ProtocolError` naming the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from pocketmq.errors import LocalProtocolError

__all__ = [
    "ConsumerData",
    "ConsumerListBody",
    "HeartbeatData",
    "LockBatchRequest",
    "LockBatchResponse",
    "MessageQueue",
    "ProducerData",
    "SubscriptionData",
    "UnlockBatchRequest",
    "decode_json_body",
    "encode_json_body",
]

_SPECIAL = {"lock_ok_mq_set": "lockOKMQSet", "mq_set": "mqSet"}


def _camel(name: str) -> str:
    special = _SPECIAL.get(name)
    if special is not None:
        return special
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _heartbeat_names(name: str) -> str:
    return "clientID" if name == "client_id" else _camel(name)  # HeartbeatData's own spelling


class _Body(msgspec.Struct, frozen=True, rename=_camel, gc=False):
    """Base of the JSON bodies: RocketMQ's camelCase names."""


class SubscriptionData(_Body, frozen=True):
    """A consumer's subscription to one topic: the expression and its parsed tags and codes."""

    topic: str
    sub_string: str = "*"
    tags_set: list[str] = []
    code_set: list[int] = []
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False


class ConsumerData(_Body, frozen=True):
    """A consumer group as one client runs it: push or pull, clustering or broadcasting, where
    a new group starts, and its subscriptions."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: list[SubscriptionData] = []
    unit_mode: bool = False


class ProducerData(_Body, frozen=True):
    """A producer group a client runs (transaction check-backs are sent to its connections)."""

    group_name: str


class HeartbeatData(_Body, frozen=True, rename=_heartbeat_names):
    """A ``HEART_BEAT`` body: the client's id and every producer and consumer group it runs."""

    client_id: str
    producer_data_set: list[ProducerData] = []
    consumer_data_set: list[ConsumerData] = []


class MessageQueue(_Body, frozen=True):
    """A queue as the remoting clients name it: topic, broker name, queue id."""

    topic: str
    broker_name: str
    queue_id: int


class LockBatchRequest(_Body, frozen=True):
    """A ``LOCK_BATCH_MQ`` body: an orderly consumer asks for these queues."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = []
    only_this_broker: bool = False


class UnlockBatchRequest(_Body, frozen=True):
    """An ``UNLOCK_BATCH_MQ`` body: the consumer releases these queues."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = []
    only_this_broker: bool = False


class LockBatchResponse(_Body, frozen=True):
    """The answer to ``LOCK_BATCH_MQ``: the queues the consumer now holds."""

    lock_ok_mq_set: list[MessageQueue] = []


class ConsumerListBody(_Body, frozen=True):
    """The answer to ``GET_CONSUMER_LIST_BY_GROUP``: the client ids of a group's consumers."""

    consumer_id_list: list[str] = []


_encode = msgspec.json.Encoder().encode
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
T = TypeVar("T")


def decode_json_body(data: bytes, kind: type[T]) -> T:
    """Decode a request body as ``kind``; a mismatch is a :class:`ProtocolError` naming the
    field."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        raise LocalProtocolError(f"invalid {kind.__name__} body: {exc}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise LocalProtocolError(f"malformed {kind.__name__} body: {exc}") from None


def encode_json_body(body: msgspec.Struct) -> bytes:
    """A response body as RocketMQ's clients read it."""
    return _encode(body)
