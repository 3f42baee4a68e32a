"""What applications send and receive: plain, immutable values.

These types are the contract between the SDK and everything built on it (the reliability toolkit,
the Spark data source, the CLI). They carry no connection state, so they can be stored, compared,
pickled to Spark workers and rebuilt in tests.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

__all__ = ["ConsumeStatus", "Message", "MessageView", "SendResult", "SendStatus"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """A message to send.

    ``message_id`` is normally left empty: the producer assigns a unique id once, and keeps it
    across retries so consumers can deduplicate. Set it yourself when the id must come from your
    own records (the outbox does). ``delivery_time`` is epoch seconds (a delayed message);
    ``message_group`` makes the message part of a FIFO group.
    """

    topic: str
    body: bytes
    tag: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delivery_time: float | None = None
    message_id: str | None = None


class SendStatus(enum.Enum):
    """How a send ended. Anything other than ``OK`` still means the message was stored, with a
    weaker guarantee: not yet known on disk (``FLUSH_DISK_TIMEOUT``), or on the master only
    (``SLAVE_NOT_AVAILABLE``, ``FLUSH_SLAVE_TIMEOUT``: docs/replication.md §3). None of them is
    retried: a retry would store a second copy."""

    OK = "OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"


class SendResult(msgspec.Struct, frozen=True, kw_only=True):
    """The broker's acknowledgement of one stored message.

    A frozen ``msgspec.Struct``, as :class:`MessageView` is: one is built for every message
    sent, and a frozen dataclass's ``__init__`` (each field through ``object.__setattr__``)
    cost twice as much as the rest of building the send's answer (docs/benchmarks.md,
    "Producer send path").
    """

    message_id: str
    topic: str
    queue_id: int
    queue_offset: int
    broker_name: str
    status: SendStatus = SendStatus.OK
    transaction_id: str | None = None


class MessageView(msgspec.Struct, frozen=True, kw_only=True):
    """A delivered message as a consumer sees it.

    ``topic`` is always the topic the producer sent to, also when the message comes back from the
    group's retry topic. ``delivery_attempt`` starts at 1; ``reconsume_times`` is
    ``delivery_attempt - 1``. ``receipt_handle`` is set for messages received with
    :class:`SimpleConsumer` (pop mode) and is needed to ack them.

    A frozen ``msgspec.Struct`` rather than a dataclass: one is built for every delivered
    message, and a frozen dataclass of these fields costs five times as much to build (copy one
    with ``msgspec.structs.replace``).
    """

    message_id: str
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tag: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = {}
    message_group: str | None = None
    delivery_attempt: int = 1
    born_timestamp: int = 0
    store_timestamp: int = 0
    broker_name: str = ""
    receipt_handle: str | None = None

    @property
    def reconsume_times(self) -> int:
        """RocketMQ's name for the number of earlier deliveries."""
        return self.delivery_attempt - 1


class ConsumeStatus(enum.Enum):
    """A push-consumer listener's verdict on a batch.

    Returning ``None``, raising, or running past the consume timeout counts as
    ``RECONSUME_LATER``.
    """

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
