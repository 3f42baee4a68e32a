"""Between the SDK's values (``Message``, ``MessageView``) and wire structures."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from pocketmq import properties as props
from pocketmq.client.message import Message
from pocketmq.compiled import load
from pocketmq.contract import check_keys, check_message, check_user_properties
from pocketmq.errors import InvalidArgumentError
from pocketmq.ids import new_message_id
from pocketmq.names import validate_stored_topic
from pocketmq.protocol import structs as w

__all__ = ["SYSTEM_PROPERTIES", "to_view", "to_wire", "validate_message"]

SYSTEM_PROPERTIES: Final = props.SYSTEM_PROPERTIES

if TYPE_CHECKING:
    from pocketmq.client._views import to_view
else:  # compiled with the push consumer's path (docs/design.md "Compiled hot paths")
    to_view = load("pocketmq.client._views").to_view


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


_BYTES: Final = (bytes, bytearray, memoryview)
# topics already found storable (and valid text): a producer sends to few topics, each often
_STORABLE_TOPICS: Final[set[str]] = set()
_MAX_REMEMBERED: Final = 4096
_NO_KEYS: Final[tuple[str, ...]] = ()  # a Message's default keys (the one empty tuple)


def validate_message(message: Message, max_size: int | None = None) -> None:
    """Refuse a message the broker would refuse, before anything is sent: a clear
    :class:`InvalidArgumentError` instead of a failure deep in a send.

    The Python-level checks (types, text the wire can carry) are the SDK's; the rules after
    them are the broker's own send contract (pocketmq.contract), checked again on arrival.
    Every send goes through here: each field is read once; a plain message (topic and body,
    every other field its default) to a topic found storable before, which every check would
    pass, costs one test per field; and the contract is not asked when nothing is left for it
    to check (docs/benchmarks.md, "Producer send path" and "Producer send path, fewer levels").
    """
    if type(message) is Message:  # a plain message? (the docstring)
        topic, body = message.topic, message.body
        if (
            type(topic) is str
            and type(body) is bytes
            and message.tag is None
            and message.keys is _NO_KEYS
            and message.message_group is None
            and message.message_id is None
            and message.delivery_time is None
            and type(message.properties) is dict
            and not message.properties
            and topic in _STORABLE_TOPICS
            and len(body) > 0
            and (max_size is None or len(body) <= max_size)
        ):
            return
    elif not isinstance(message, Message):
        raise InvalidArgumentError(f"expected a pocketmq.Message, got {type(message).__name__}")
    topic, body, tag = message.topic, message.body, message.tag
    keys, properties = message.keys, message.properties
    group, message_id, delivery = message.message_group, message.message_id, message.delivery_time
    if not isinstance(topic, str) or not topic:
        raise InvalidArgumentError("message topic must be a non-empty string")
    if not isinstance(body, _BYTES):
        raise InvalidArgumentError(
            f"message body must be bytes, got {type(body).__name__} (encode text with .encode())"
        )
    if tag is not None and not isinstance(tag, str):
        raise InvalidArgumentError("tag must be a string")
    for key in keys:
        if not isinstance(key, str):
            raise InvalidArgumentError(f"key {key!r} must be a string")
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidArgumentError("properties must map strings to strings")
    if group is not None and not isinstance(group, str):
        raise InvalidArgumentError("message message group must be a string")
    if message_id is not None and not isinstance(message_id, str):
        raise InvalidArgumentError("message id must be a string")
    if delivery is not None and (
        isinstance(delivery, bool)
        or not isinstance(delivery, int | float)
        or not 0 <= delivery <= _MAX_DELIVERY_TIME  # also refuses nan
    ):
        raise InvalidArgumentError(
            f"delivery_time must be epoch seconds (a finite, non-negative number), got {delivery!r}"
        )
    if type(topic) is not str or topic not in _STORABLE_TOPICS:  # a str subclass: each time
        validate_stored_topic(topic)
        if type(topic) is str and len(_STORABLE_TOPICS) < _MAX_REMEMBERED:
            _STORABLE_TOPICS.add(topic)
    if tag or group or message_id or keys or properties:
        _check_texts(tag, group, message_id, keys, properties)
    size = len(body)
    if not (tag or keys or properties) and size > 0 and (max_size is None or size <= max_size):
        return  # the contract asks nothing more of it: its topic is storable (above)
    violation = (
        (check_keys(keys) if keys else None)
        or (check_user_properties(properties) if properties else None)
        or check_message(
            topic,
            size,
            {props.TAGS: tag} if tag else {},
            max_body=max_size if max_size is not None else len(body),
        )
    )
    if violation is not None:
        raise InvalidArgumentError(violation.text)


def _check_texts(
    tag: str | None,
    group: str | None,
    message_id: str | None,
    keys: Iterable[str],
    properties: Mapping[str, str],
) -> None:
    """The text of a message's strings, in the order their errors are reported: tag, group, id,
    keys, property names, property values (empty strings are the contract's business)."""
    if tag:
        _check_text(tag, "tag")
    if group:
        _check_text(group, "message group")
    if message_id:
        _check_text(message_id, "message id")
    for key in keys:
        if key:
            _check_text(key, "key")
    if properties:
        for name in properties:
            if name:
                _check_text(name, "property name")
        for name, value in properties.items():
            if value:
                _check_text(value, f"property {name!r}")


_MESSAGE_ID: Final = props.MESSAGE_ID
_TAGS: Final = props.TAGS
_KEYS: Final = props.KEYS
_MESSAGE_GROUP: Final = props.MESSAGE_GROUP
_DELIVER_TIME_MS: Final = props.DELIVER_TIME_MS


def to_wire(message: Message, message_id: str | None = None) -> w.InboundMessage:
    """``message`` as the wire carries it: id, tag, keys, group and delivery time become
    properties; the id is assigned here once, so retries keep it.
    """
    born = time.time_ns() // 1_000_000  # one clock reading for the id and the born time
    properties = dict(message.properties)
    properties[_MESSAGE_ID] = message_id or message.message_id or new_message_id(born)
    if message.tag:
        properties[_TAGS] = message.tag
    if message.keys:
        properties[_KEYS] = " ".join(message.keys)
    if message.message_group:
        properties[_MESSAGE_GROUP] = message.message_group
    if message.delivery_time is not None:
        properties[_DELIVER_TIME_MS] = str(int(message.delivery_time * 1000))
    return w.InboundMessage(message.topic, bytes(message.body), properties, -1, 0, born)
