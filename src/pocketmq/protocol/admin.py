"""Queries and administration: message lookups, the attempt history, browsing and redrive of
dead letters, topics, groups, and the broker's status.
"""

from __future__ import annotations

from typing import Any

from pocketmq.model.attempts import Attempt
from pocketmq.protocol.body import Body
from pocketmq.protocol.messages import Delivered

__all__ = [
    "Attempt",
    "BrokerStatusResponse",
    "BrowseRequest",
    "CreateTopicResponse",
    "GroupSpec",
    "ListGroupsResponse",
    "ListTopicsResponse",
    "MessageHistoryRequest",
    "MessageHistoryResponse",
    "NameRequest",
    "QueryMessageRequest",
    "QueryMessageResponse",
    "QueueMove",
    "QueueStatus",
    "QueueStatusRequest",
    "QueueStatusResponse",
    "RedriveItem",
    "RedriveRequest",
    "RedriveResponse",
    "ReportOutcomesRequest",
    "ResetOffsetRequest",
    "ResetOffsetResponse",
    "TopicSpec",
    "UpdateTopicRequest",
    "UpdateTopicResponse",
]


class QueryMessageRequest(Body, frozen=True):
    """Look up messages by id, or by topic and business key, through the store's index; paged with
    ``skip`` so any number of matches fits in frames."""

    message_id: str = ""
    topic: str = ""
    key: str = ""
    max_count: int = 32
    skip: int = 0  # results already received (the next page starts after them)


class QueryMessageResponse(Body, frozen=True):
    """One page of matches (also BROWSE's answer); ``more`` says the page was cut to fit a frame."""

    messages: list[Delivered]
    more: bool = False  # cut to fit a frame: ask again with skip += len(messages)


class MessageHistoryRequest(Body, frozen=True):
    """Asks for every delivery attempt of one message (``pocketmq message history``)."""

    message_id: str


class MessageHistoryResponse(Body, frozen=True):
    """The attempts recorded for a message, oldest first."""

    attempts: list[Attempt]


class ReportOutcomesRequest(Body, frozen=True):
    """Push consumers report the attempts that succeeded (one-way, batched): pull mode has no ack,
    so the history would otherwise only know the failures."""

    group: str
    consumer: str
    attempts: list[Attempt]


class BrowseRequest(Body, frozen=True):
    """Read any topic from an offset without consuming it and without a group (operators, exports):
    dead-letter topics and the internal ledgers too."""

    topic: str
    queue_id: int = 0
    offset: int = 0
    max_count: int = 32


class RedriveRequest(Body, frozen=True):
    """Resend dead letters of a group, named by their DLQ offsets, to their origin topic or the
    group's retry topic."""

    group: str
    dlq_offsets: list[int]
    target: str = "origin"  # origin | retry
    operator: str = ""


class RedriveItem(Body, frozen=True):
    """What happened to one dead letter of a redrive, so a redrive interrupted half-way can be run
    again and resends only what it had not."""

    dlq_offset: int
    message_id: str
    status: str  # resent | already | missing | failed: ...
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


class RedriveResponse(Body, frozen=True):
    """One item per offset asked for; ``already_redriven`` lists offsets an earlier redrive had
    resent."""

    items: list[RedriveItem]
    already_redriven: list[int] = []


class TopicSpec(Body, frozen=True):
    """A topic's definition, as created and listed, and as a broker registers it with the name
    server."""

    name: str
    queues: int = 8
    topic_type: str = "normal"  # normal | fifo | delay | transaction
    perm: int = 6  # 4 read + 2 write


class CreateTopicResponse(Body, frozen=True):
    """CREATE_TOPIC's answer: False when the topic existed already with the same settings (a
    topic existing with other settings is refused: UPDATE_TOPIC changes it)."""

    created: bool = True


class UpdateTopicRequest(Body, frozen=True):
    """Change a topic's queues, type or permission (what is left at its "unchanged" value stays).
    Dropping queues that hold messages a group has not consumed is refused unless ``force``;
    ``dry_run`` answers what would happen, refusal included, and changes nothing."""

    name: str
    queues: int = 0  # 0: unchanged
    topic_type: str = ""  # "": unchanged
    perm: int = -1  # -1: unchanged
    force: bool = False
    dry_run: bool = False


class UpdateTopicResponse(Body, frozen=True):
    """What a topic update did (or, dry run, would do) on one broker: the definitions before and
    after, the queues dropped (hidden: their messages stay in the store and come back if the topic
    grows again), the messages stored there and, per group with progress on the topic, how many
    of them it has not consumed; ``refusal`` says why it was (or would be) refused."""

    broker_name: str
    before: TopicSpec
    after: TopicSpec
    dropped_queues: list[int] = []
    stored: int = 0
    unconsumed: dict[str, int] = {}
    refusal: str = ""
    applied: bool = False


class GroupSpec(Body, frozen=True):
    """A consumer group's definition: its consumption mode, retry policy (delays in ms on the wire)
    and where a new group starts."""

    name: str
    fifo: bool = False
    max_retries: int = 16
    retry_delays_ms: list[int] = []  # customized policy; empty = the default delay levels
    broadcast: bool = False
    consume_from: str = "first"  # first | last
    retry_initial_ms: int = 0  # > 0: exponential policy
    retry_multiplier: float = 2.0
    retry_max_ms: int = 0


class NameRequest(Body, frozen=True):
    """Names the topic or group to delete."""

    name: str


class ListTopicsResponse(Body, frozen=True):
    """Every topic of the broker."""

    topics: list[TopicSpec]


class ListGroupsResponse(Body, frozen=True):
    """Every consumer group of the broker."""

    groups: list[GroupSpec]


class BrokerStatusResponse(Body, frozen=True):
    """The broker's counters and store statistics (``pocketmq broker status``, benchmarks): a
    snapshot, not a stream."""

    broker_name: str
    version: str
    counters: dict[str, int]
    store: dict[str, Any]
    replication: dict[str, Any] = {}
    uptime_seconds: float = 0.0  # since the broker started (last, so older peers decode)


class QueueStatusRequest(Body, frozen=True):
    """Asks for a topic's queue offsets, with a group's committed offsets when ``group`` is set: how
    far behind a group is."""

    topic: str
    group: str = ""


class QueueStatus(Body, frozen=True):
    """One queue's retained range and, with a group, its committed offset (-1: none)."""

    queue_id: int
    min_offset: int
    max_offset: int
    committed_offset: int = -1


class QueueStatusResponse(Body, frozen=True):
    """The status of every queue of a topic on this broker."""

    topic: str
    broker_name: str
    queues: list[QueueStatus]


class ResetOffsetRequest(Body, frozen=True):
    """Moves a group's offsets on a topic (``pocketmq group reset-offset``): ``to`` is ``time``
    (``at_ms``: the first message stored at or after it), ``earliest`` or ``latest``."""

    group: str
    topic: str
    to: str
    at_ms: int = 0


class QueueMove(Body, frozen=True):
    """One queue's committed offset before a reset (-1: none) and after it."""

    queue_id: int
    before: int
    after: int


class ResetOffsetResponse(Body, frozen=True):
    """What a reset did on this broker, queue by queue."""

    broker_name: str
    queues: list[QueueMove]


class GatewayInfoResponse(Body, frozen=True):
    """What a gRPC gateway in front of this broker must know to answer as the broker would: its
    name, its message limits, the delay levels and the longest long poll (docs/proxy.md)."""

    broker_name: str
    max_message_size: int
    max_properties_size: int
    delay_levels: list[float]
    max_long_poll_ms: int
    auto_renew_invisible_ms: int
