"""The two records the toolkit keeps: the message stub (producer side) and the message log entry.

A *stub* is the producer's durable copy of a message, written in the same database transaction
as the business change that caused it. If the broker loses the message, or the process dies
between commit and send, the stub is what gets sent again. Its status tells how far the message
got: ``UNCONFIRMED`` until a consumer's business transaction marks it ``CONFIRMED``; ``UNKNOWN``
when the last send may or may not have been stored; ``VOID`` when an operator gave up on it.

A *log entry* is the consumer's receipt: one row per (consumer group, message id), written the
moment a message arrives and marked ``CONSUMED`` in the same transaction as the handler's
effects. The resend scheduler reads it as proof that a message reached the consumer.

Both are frozen values that mirror the table columns one to one (see ``schema.py`` and
docs/reliability.md "Tables"), so every reader of the tables — the SQL backend, the Spark
pipeline's resend step — builds them from rows with the same ``from_row`` and tests can compare
them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pocketmq.client import Message
from pocketmq.errors import InvalidArgumentError
from pocketmq.ids import new_message_id

__all__ = [
    "MANUAL_PREFIX",
    "PENDING_STATUSES",
    "PENDING_STATUS_VALUES",
    "LogEntry",
    "LogStatus",
    "MessageStub",
    "StubStatus",
    "keys_column",
    "keys_from_column",
    "new_message_id",
    "stub_for",
]

#: ``last_error`` starts with this once a stub has been handed to manual handling (alerted).
MANUAL_PREFIX = "manual:"


class StubStatus(enum.Enum):
    """Where a stubbed message stands (the ``message_stub.status`` column); the resend rule and
    the operators' commands decide by it."""

    UNCONFIRMED = "UNCONFIRMED"
    CONFIRMED = "CONFIRMED"
    VOID = "VOID"
    UNKNOWN = "UNKNOWN"


#: Statuses the relay and the resend scheduler still work on.
PENDING_STATUSES = (StubStatus.UNCONFIRMED, StubStatus.UNKNOWN)
#: The same, as the values stored in ``message_stub.status``.
PENDING_STATUS_VALUES: tuple[str, ...] = tuple(status.value for status in PENDING_STATUSES)


def keys_column(keys: tuple[str, ...] | list[str]) -> str | None:
    """The ``keys`` column: space-separated (keys hold no white space, see :func:`stub_for`)."""
    return " ".join(keys) if keys else None


def keys_from_column(value: str | None) -> tuple[str, ...]:
    """The message keys stored in a ``keys`` column (NULL or empty: none)."""
    return tuple(value.split()) if value else ()


class LogStatus(enum.Enum):
    """The consumer's progress on one message (the ``message_log.status`` column): RECEIVED is
    proof of arrival for the resend rule, CONSUMED is the idempotency record."""

    RECEIVED = "RECEIVED"
    CONSUMED = "CONSUMED"


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageStub:
    """One row of ``message_stub``, the producer's durable copy of a message. Times are naive UTC.

    A frozen value, so that what a sender selected (its ``send_count`` and ``next_resend_at``)
    can be compared with the row when it claims it.
    """

    message_id: str
    topic: str
    content: bytes
    status: StubStatus
    next_resend_at: datetime
    created_at: datetime
    updated_at: datetime
    tag: str | None = None
    keys: tuple[str, ...] = ()
    send_count: int = 0
    broker_name: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    last_error: str | None = None

    @property
    def alerted(self) -> bool:
        """Whether the stub was already handed to manual handling."""
        return self.last_error is not None and self.last_error.startswith(MANUAL_PREFIX)

    def to_message(self) -> Message:
        """The message to (re)send: same id, topic, tag, keys and body every time."""
        return Message(
            topic=self.topic,
            body=self.content,
            tag=self.tag,
            keys=self.keys,
            message_id=self.message_id,
        )

    def to_row(self) -> dict[str, Any]:
        """The ``message_stub`` row of this stub, column by column."""
        return {
            "message_id": self.message_id,
            "topic": self.topic,
            "tag": self.tag,
            "keys": keys_column(self.keys),
            "content": self.content,
            "status": self.status.value,
            "send_count": self.send_count,
            "broker_name": self.broker_name,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "next_resend_at": self.next_resend_at,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "last_error": self.last_error,
        }

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> MessageStub:
        """The stub a ``message_stub`` row holds: a database row, or a row of the resend list.

        Extra columns (the resend list's ``max_logged_offset``) are ignored; ``content`` may be
        any bytes-like value (Spark hands out ``bytearray``).
        """
        return cls(
            message_id=str(row["message_id"]),
            topic=str(row["topic"]),
            tag=row["tag"],
            keys=keys_from_column(row["keys"]),
            content=bytes(row["content"]),
            status=StubStatus(row["status"]),
            send_count=int(row["send_count"]),
            broker_name=row["broker_name"],
            queue_id=row["queue_id"],
            queue_offset=row["queue_offset"],
            next_resend_at=row["next_resend_at"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_error=row["last_error"],
        )


def stub_for(message: Message, now: datetime) -> tuple[Message, MessageStub]:
    """The stub for ``message``, and the message carrying the stub's (possibly new) id.

    The stub table has columns for topic, tag, keys and body only, so a message that relies on
    properties, a message group or a delivery time is refused rather than silently sent without
    them on a resend.
    """
    if message.properties:
        raise InvalidArgumentError("outbox messages cannot carry properties (no column for them)")
    if message.message_group is not None:
        raise InvalidArgumentError("outbox messages cannot carry a message group")
    if message.delivery_time is not None:
        raise InvalidArgumentError("outbox messages cannot carry a delivery time")
    if not message.topic:
        raise InvalidArgumentError("message topic is empty")
    for key in message.keys:
        if not key or any(ch.isspace() for ch in key):
            raise InvalidArgumentError(f"message key {key!r} is empty or contains whitespace")
    message_id = message.message_id or new_message_id()
    if len(message_id) > 64:
        raise InvalidArgumentError("message id is longer than 64 characters")
    if message.message_id != message_id:
        message = replace(message, message_id=message_id)
    stub = MessageStub(
        message_id=message_id,
        topic=message.topic,
        tag=message.tag,
        keys=tuple(message.keys),
        content=bytes(message.body),
        status=StubStatus.UNCONFIRMED,
        send_count=0,
        next_resend_at=now,
        created_at=now,
        updated_at=now,
    )
    return message, stub


@dataclass(frozen=True, kw_only=True, slots=True)
class LogEntry:
    """One row of ``message_log``, the consumer's receipt of a message. Times are naive UTC."""

    consumer_group: str
    message_id: str
    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    status: LogStatus
    receive_count: int
    created_at: datetime
    consumed_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> LogEntry:
        """The entry a ``message_log`` row holds."""
        return cls(
            consumer_group=row["consumer_group"],
            message_id=row["message_id"],
            topic=row["topic"],
            broker_name=row["broker_name"],
            queue_id=row["queue_id"],
            queue_offset=row["queue_offset"],
            status=LogStatus(row["status"]),
            receive_count=row["receive_count"],
            created_at=row["created_at"],
            consumed_at=row["consumed_at"],
        )
