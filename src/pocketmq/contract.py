"""The send contract: what a message must be to be stored, one set of rules for every path.

Why one module: a rule that lives at the edges is a rule some edge forgets. The SDK applies these
rules before it sends anything (an early :class:`~pocketmq.errors.InvalidArgumentError`), and the
broker applies them again to every message, whichever protocol brought it (native, gRPC, a
redrive), because any client may send anything. Each violation names its :class:`Rule`, so an
adapter can answer with its protocol's own code (the gRPC adapter answers ILLEGAL_MESSAGE_TAG
for :attr:`Rule.TAG`, as RocketMQ's proxy does) without checking anything itself.

The rules work on a message's wire form: its topic, body size, flags, born timestamp and
properties (``TAGS``, ``KEYS``, ``MSG_GROUP``, ``DELIVER_TIME_MS``, ``DELAY``, ``TRAN_MSG``:
docs/protocol.md, "Messages on the wire"). docs/semantics.md, "Messages", lists them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

from pocketmq import properties as props
from pocketmq.names import is_storable_topic

__all__ = [
    "ACCEPTED_KINDS",
    "MAX_FLAGS",
    "MAX_TIMESTAMP_MS",
    "MessageKind",
    "Rule",
    "Violation",
    "check_keys",
    "check_message",
    "check_user_properties",
    "kind_of",
]

MAX_FLAGS: Final = 0xFFFF_FFFF
"""The record's ``flags`` field is 32 bits (docs/storage-format.md §1)."""
MAX_TIMESTAMP_MS: Final = 2**63 - 1
"""Epoch milliseconds in a signed 64-bit value, as every client has them."""
_TRANSACTION_FLAG: Final = 1  # record flags bits 0-1 = 1: a prepared (half) message


class Rule(enum.Enum):
    """Which rule a message broke."""

    TOPIC = "topic"
    BODY_EMPTY = "body_empty"
    BODY_TOO_LARGE = "body_too_large"
    TAG = "tag"
    KEY = "key"
    PROPERTY = "property"
    DELIVERY_TIME = "delivery_time"
    MESSAGE_TYPE = "message_type"
    FIELD_RANGE = "field_range"


class Violation(NamedTuple):
    """A broken rule and a sentence for the sender saying what to change."""

    rule: Rule
    text: str


class MessageKind(enum.Enum):
    """RocketMQ 5's message types, as a message's properties imply them."""

    NORMAL = "normal"
    FIFO = "fifo"
    DELAY = "delay"
    TRANSACTION = "transaction"


ACCEPTED_KINDS: Final[Mapping[str, frozenset[MessageKind]]] = {
    # a normal topic takes every kind, as every topic did before RocketMQ 5 typed them (4.x
    # sent delay levels, half messages and ordered messages with a sharding key to any topic);
    # a typed topic takes only its own kind
    "normal": frozenset(MessageKind),
    "fifo": frozenset({MessageKind.FIFO}),
    "delay": frozenset({MessageKind.DELAY}),
    "transaction": frozenset({MessageKind.TRANSACTION}),
}
"""Which kinds of message each topic type accepts (docs/semantics.md, "Messages")."""
_TAKES_EVERY_KIND: Final = "normal"
"""The type whose topics accept every kind: its check cannot fail, so it is not made (a send's
hot path; ``kind_of`` and the set's enum hashing cost more than the rest of the contract)."""


def kind_of(properties: Mapping[str, str], flags: int = 0) -> MessageKind:
    """The message's kind from its properties (a transaction first, then FIFO, then delay)."""
    if properties.get(props.TRANSACTION_PREPARED) == "true" or flags & 0b11 == _TRANSACTION_FLAG:
        return MessageKind.TRANSACTION
    if properties.get(props.MESSAGE_GROUP):
        return MessageKind.FIFO
    if props.DELIVER_TIME_MS in properties or properties.get(props.DELAY_LEVEL, "0") != "0":
        return MessageKind.DELAY
    return MessageKind.NORMAL


def check_message(
    topic: str,
    body_size: int,
    properties: Mapping[str, str],
    *,
    flags: int = 0,
    born_timestamp: int = 0,
    max_body: int,
    topic_type: str | None = None,
    now_ms: int | None = None,
    max_delay_ms: int | None = None,
) -> Violation | None:
    """The first rule ``message`` breaks, or None.

    ``topic_type`` (when the topic exists) checks the kind of message against it;
    ``now_ms``/``max_delay_ms`` bound a delivery time.
    """
    if not is_storable_topic(topic):
        return Violation(Rule.TOPIC, f"topic name {topic!r} cannot be stored")
    if body_size <= 0:
        return Violation(Rule.BODY_EMPTY, "message body is empty")
    if body_size > max_body:
        return Violation(
            Rule.BODY_TOO_LARGE, f"message body is {body_size} bytes; the limit is {max_body}"
        )
    if not 0 <= flags <= MAX_FLAGS:
        return Violation(Rule.FIELD_RANGE, f"flags {flags} outside 0..{MAX_FLAGS} (32 bits)")
    if not 0 <= born_timestamp <= MAX_TIMESTAMP_MS:
        return Violation(
            Rule.FIELD_RANGE, f"born_timestamp {born_timestamp} is not an epoch time in ms"
        )
    if properties:  # none: an SDK's plain message (no tag), nothing below to look up
        if "" in properties:
            return Violation(Rule.PROPERTY, "a property name must not be empty")
        tag = properties.get(props.TAGS)
        if tag is not None and "||" in tag:
            return Violation(Rule.TAG, f"tag {tag!r} must not contain '||' (it separates tags)")
        keys = properties.get(props.KEYS)
        if keys is not None and not keys.split():
            return Violation(Rule.KEY, "keys must not be blank")
        due = properties.get(props.DELIVER_TIME_MS)
        if due is not None:
            violation = _check_delivery_time(due, now_ms, max_delay_ms)
            if violation is not None:
                return violation
    if topic_type is not None and topic_type != _TAKES_EVERY_KIND:
        kind = kind_of(properties, flags)
        accepted = ACCEPTED_KINDS.get(topic_type, frozenset())
        if kind not in accepted:
            names = ", ".join(sorted(k.value for k in accepted))
            return Violation(
                Rule.MESSAGE_TYPE,
                f"topic {topic!r} is a {topic_type} topic: it accepts {names} messages, "
                f"not a {kind.value} message",
            )
    return None


def _check_delivery_time(
    due: str, now_ms: int | None, max_delay_ms: int | None
) -> Violation | None:
    try:
        due_ms = int(due)
    except ValueError:
        return Violation(Rule.DELIVERY_TIME, f"delivery time {due!r} is not epoch ms")
    if not 0 <= due_ms <= MAX_TIMESTAMP_MS:
        return Violation(Rule.DELIVERY_TIME, f"delivery time {due_ms} is not epoch ms")
    if now_ms is not None and max_delay_ms is not None and due_ms - now_ms > max_delay_ms:
        return Violation(
            Rule.DELIVERY_TIME,
            f"delivery time {due_ms} (epoch ms) is more than {max_delay_ms / 86_400_000:g} days "
            "ahead",
        )
    return None


def check_keys(keys: Iterable[str]) -> Violation | None:
    """Business keys as a list (SDK, gRPC): each must survive being joined with spaces."""
    for key in keys:
        if not key or any(c.isspace() for c in key):
            return Violation(Rule.KEY, f"key {key!r} must be non-empty and without spaces")
    return None


def check_user_properties(names: Iterable[str]) -> Violation | None:
    """Application property names: not empty, and none of the system's own (which every client
    hides from message views, so a message could not carry them back)."""
    for name in names:
        if not name:
            return Violation(Rule.PROPERTY, "a property name must not be empty")
        if name in props.SYSTEM_PROPERTIES:
            return Violation(Rule.PROPERTY, f"property {name!r} is reserved")
    return None
