"""What the admin client returns: small frozen values, never protocol structures.

Callers (the CLI, the pipelines, operators' scripts) depend on these names and fields only, so
the wire format can change without breaking them. Times are epoch seconds where the name says
``_at`` and epoch milliseconds in attempt records and stored messages, as the broker records
them (docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from pocketmq import properties as props
from pocketmq.client.message import MessageView
from pocketmq.protocol import decode_body
from pocketmq.protocol import structs as w

__all__ = [
    "BrokerInfo",
    "BrokerStatus",
    "DeadLetter",
    "DeliveryAttempt",
    "GroupInfo",
    "OffsetMove",
    "QueueInfo",
    "RedriveItem",
    "RedriveReport",
    "StoredMessage",
    "TopicChange",
    "TopicInfo",
    "TransactionInfo",
]


_decode_packed = msgspec.msgpack.Decoder(list[w.Attempt]).decode


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the cluster knows it: queues per broker, type (normal, fifo, delay,
    transaction) and permissions (4 read + 2 write)."""

    name: str
    queues: int
    topic_type: str
    perm: int


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What :meth:`Admin.update_topic` did on one broker (or, refused, would have done):
    ``dropped_queues`` are hidden, not emptied (their messages stay in the store and come back
    if the topic grows again); ``stored`` messages are in them, and ``unconsumed`` says per group
    with progress on the topic how many of those it has not consumed."""

    broker_name: str
    before: TopicInfo
    after: TopicInfo
    dropped_queues: tuple[int, ...]
    stored: int
    unconsumed: Mapping[str, int]
    applied: bool

    @property
    def changed(self) -> bool:
        """Whether the topic's settings differ after the update."""
        return self.before != self.after

    @staticmethod
    def from_wire(reply: w.UpdateTopicResponse) -> TopicChange:
        """The admin client's value for a broker's UPDATE_TOPIC answer."""
        return TopicChange(
            reply.broker_name,
            _topic_info(reply.before),
            _topic_info(reply.after),
            tuple(reply.dropped_queues),
            reply.stored,
            dict(reply.unconsumed),
            reply.applied,
        )


def _topic_info(spec: w.TopicSpec) -> TopicInfo:
    return TopicInfo(spec.name, spec.queues, spec.topic_type, spec.perm)


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group's settings: how its consumers share messages and how failures retry
    (``retry_delays`` in seconds; empty means the default delay levels)."""

    name: str
    fifo: bool
    broadcast: bool
    max_retries: int
    retry_delays: tuple[float, ...]
    consume_from: str


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue on one broker: the offsets it holds (``[min_offset, max_offset)``) and, when a
    group was named, that group's committed offset (-1: none yet). ``address`` is the broker's,
    for reading the queue with :meth:`Admin.browse`."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    committed_offset: int
    address: str = ""

    @property
    def lag(self) -> int:
        """Messages the group has not consumed yet (everything stored, if it committed none)."""
        if self.committed_offset < 0:
            return self.max_offset - self.min_offset
        return max(0, self.max_offset - self.committed_offset)


@dataclass(frozen=True, slots=True)
class OffsetMove:
    """One queue's committed offset before an operator's reset (-1: none) and after it
    (:meth:`Admin.reset_offset`)."""

    broker_name: str
    queue_id: int
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in a dead-letter queue, with where it came from and why it is there."""

    address: str
    dlq_offset: int
    origin_topic: str
    reason: str
    message: MessageView


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """A broker's record of one transaction (times are epoch seconds).

    ``state``: PREPARED, COMMITTED, ROLLED_BACK or DISCARDED (no outcome after the maximum
    number of checks). ``source`` says who decided: client, check, broker or recovery.
    """

    address: str
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    state: str
    checks: int
    prepared_at: float
    updated_at: float
    source: str
    detail: str


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker of the cluster: its group name, native address, gRPC address (if any),
    and its place in the group (docs/replication.md §1)."""

    name: str
    address: str
    grpc_address: str = ""
    broker_id: int = 0
    role: str = "master"
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """A broker's counters and store state, as ``pocketmq broker status`` prints them: what an
    operator watches (docs/operations.md, docs/transactions.md §6 name the counters).
    ``error``: the broker did not answer ("unreachable: ..."); only its listing is known."""

    address: str
    broker_name: str
    version: str
    counters: Mapping[str, int]
    store: Mapping[str, Any]
    replication: Mapping[str, Any] = field(default_factory=dict)
    uptime_seconds: float = 0.0
    error: str = ""


@dataclass(frozen=True, slots=True)
class Promotion:
    """A slave made master of its group: its address, its new epoch, and the end of its log
    (everything before it is what the group now holds: docs/replication.md §6)."""

    address: str
    epoch: int
    log_end: int


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    """One recorded delivery attempt of a message to a consumer group (times in epoch ms;
    ``finished_at`` 0 while unknown). ``outcome``: SUCCESS, RECONSUME_LATER, EXCEPTION,
    TIMEOUT, INVISIBLE_EXPIRED, DLQ, REDRIVEN, or a transaction step (TX_PREPARED, ...)."""

    message_id: str
    group: str
    topic: str
    attempt: int
    consumer: str
    outcome: str
    error: str
    delivered_at: int
    finished_at: int
    message_group: str = ""

    @classmethod
    def from_ledger(cls, message: StoredMessage) -> list[DeliveryAttempt]:
        """The attempts a record of the broker's ``%SYS%HISTORY`` ledger holds (read with
        :meth:`Admin.browse`): up to 32 in a packed record, one in a record written before
        packing (docs/storage-format.md, "The attempt history")."""
        try:
            records = _decode_packed(message.body)
        except msgspec.ValidationError:  # one attempt: a record written before packing
            records = [decode_body(message.body, w.Attempt)]
        return [attempt_from_wire(record) for record in records]


def attempt_from_wire(record: w.Attempt) -> DeliveryAttempt:
    """The typed value of a wire attempt record (the admin client's conversion)."""
    return DeliveryAttempt(
        record.message_id,
        record.group,
        record.topic,
        record.attempt,
        record.consumer,
        record.outcome,
        record.error,
        record.delivered_at,
        record.finished_at,
        record.message_group,
    )


@dataclass(frozen=True, slots=True)
class RedriveItem:
    """What a redrive did with one dead letter: ``status`` is ``resent`` (to ``topic``,
    ``queue_id``, ``queue_offset``), ``already`` (resent before), ``missing`` or
    ``failed: <reason>``."""

    dlq_offset: int
    message_id: str
    status: str
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


@dataclass(frozen=True, slots=True)
class RedriveReport:
    """A redrive's answer: one item per dead letter asked for, and every DLQ offset of the
    group resent so far (by this or an earlier redrive)."""

    items: tuple[RedriveItem, ...]
    already_redriven: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as a broker stores it, read with :meth:`Admin.browse` without consuming it.

    Unlike a :class:`MessageView`, nothing is translated: ``topic`` is the topic it is stored
    in (``%DLQ%<group>``, ``%RETRY%<group>``, ``%SYS%HISTORY``) and ``properties`` holds every
    property, the system ones (``RETRY_TOPIC``, ``DLQ_REASON``, ...) included.
    """

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    born_timestamp: int = 0
    store_timestamp: int = 0
    delivery_attempt: int = 1
    broker_name: str = ""

    @property
    def message_id(self) -> str:
        """The producer-assigned message id (empty for ledger records without one)."""
        return self.properties.get(props.MESSAGE_ID, "")


def stored_from_wire(message: w.Delivered) -> StoredMessage:
    """The typed value of a wire message read with BROWSE (the admin client's conversion)."""
    return StoredMessage(
        message.topic,
        message.queue_id,
        message.queue_offset,
        message.body,
        message.properties,
        message.born_timestamp,
        message.store_timestamp,
        message.delivery_attempt,
        message.broker_name,
    )
