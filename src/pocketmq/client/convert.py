"""Between the SDK's values (``Message``, ``MessageView``) and wire structures."""

from __future__ import annotations

import time
from typing import Final

from pocketmq import properties as props
from pocketmq.client.message import Message, MessageView
from pocketmq.contract import check_keys, check_message, check_user_properties
from pocketmq.errors import InvalidArgumentError
from pocketmq.ids import new_message_id
from pocketmq.names import validate_stored_topic
from pocketmq.protocol import structs as w

__all__ = ["SYSTEM_PROPERTIES", "to_view", "to_wire", "validate_message"]

SYSTEM_PROPERTIES: Final = props.SYSTEM_PROPERTIES


# delivery times are sent as epoch milliseconds in a signed 64-bit field
_MAX_DELIVERY_TIME: Final = (2**63 - 1) / 1000


def _check_text(value: str, what: str) -> None:
    """A string the wire can carry: UTF-8 has no lone surrogates (``"\udcff"``, which
    ``surrogateescape`` makes of undecodable bytes)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(
                f"{what} {value!r} is not valid text (it holds a lone surrogate)"
            ) from None


def validate_message(message: Message, max_size: int | None = None) -> None:
    """Refuse a message the broker would refuse, before anything is sent: a clear
    :class:`InvalidArgumentError` instead of a failure deep in a send.

    The Python-level checks (types, text the wire can carry) are the SDK's; the rules after
    them are the broker's own send contract (pocketmq.contract), checked again on arrival.
    """
    if not isinstance(message, Message):
        raise InvalidArgumentError(f"expected a pocketmq.Message, got {type(message).__name__}")
    if not isinstance(message.topic, str) or not message.topic:
        raise InvalidArgumentError("message topic must be a non-empty string")
    if not isinstance(message.body, bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"message body must be bytes, got {type(message.body).__name__} "
            "(encode text with .encode())"
        )
    if message.tag is not None and not isinstance(message.tag, str):
        raise InvalidArgumentError("tag must be a string")
    for key in message.keys:
        if not isinstance(key, str):
            raise InvalidArgumentError(f"key {key!r} must be a string")
    for name, value in message.properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidArgumentError("properties must map strings to strings")
    for text, what in ((message.message_group, "message group"), (message.message_id, "id")):
        if text is not None and not isinstance(text, str):
            raise InvalidArgumentError(f"message {what} must be a string")
    delivery = message.delivery_time
    if delivery is not None and (
        isinstance(delivery, bool)
        or not isinstance(delivery, int | float)
        or not 0 <= delivery <= _MAX_DELIVERY_TIME  # also refuses nan
    ):
        raise InvalidArgumentError(
            f"delivery_time must be epoch seconds (a finite, non-negative number), got {delivery!r}"
        )
    validate_stored_topic(message.topic)
    for text, what in (
        (message.tag, "tag"),
        (message.message_group, "message group"),
        (message.message_id, "message id"),
        *((key, "key") for key in message.keys),
        *((name, "property name") for name in message.properties),
        *((value, f"property {name!r}") for name, value in message.properties.items()),
    ):
        if text:
            _check_text(text, what)
    violation = (
        check_keys(message.keys)
        or check_user_properties(message.properties)
        or check_message(
            message.topic,
            len(message.body),
            {props.TAGS: message.tag} if message.tag else {},
            max_body=max_size if max_size is not None else len(message.body),
        )
    )
    if violation is not None:
        raise InvalidArgumentError(violation.text)


def to_wire(message: Message, message_id: str | None = None) -> w.InboundMessage:
    """``message`` as the wire carries it: id, tag, keys, group and delivery time become
    properties; the id is assigned here once, so retries keep it.
    """
    properties = dict(message.properties)
    properties[props.MESSAGE_ID] = message_id or message.message_id or new_message_id()
    if message.tag:
        properties[props.TAGS] = message.tag
    if message.keys:
        properties[props.KEYS] = " ".join(message.keys)
    if message.message_group:
        properties[props.MESSAGE_GROUP] = message.message_group
    if message.delivery_time is not None:
        properties[props.DELIVER_TIME_MS] = str(int(message.delivery_time * 1000))
    return w.InboundMessage(
        message.topic, bytes(message.body), properties, -1, 0, int(time.time() * 1000)
    )


def to_view(message: w.Delivered) -> MessageView:
    """A delivered message as applications see it: the original topic of a retry, system
    properties hidden.
    """
    properties = message.properties
    topic = message.topic
    if topic.startswith("%RETRY%"):
        topic = properties.get(props.RETRY_TOPIC, topic)
    keys = properties.get(props.KEYS)
    return MessageView(
        message_id=properties.get(props.MESSAGE_ID, ""),
        topic=topic,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        body=message.body,
        tag=properties.get(props.TAGS) or None,
        keys=tuple(keys.split()) if keys else (),
        properties={k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES},
        message_group=properties.get(props.MESSAGE_GROUP) or None,
        delivery_attempt=message.delivery_attempt,
        born_timestamp=message.born_timestamp,
        store_timestamp=message.store_timestamp,
        broker_name=message.broker_name,
        receipt_handle=message.receipt_handle or None,
    )
