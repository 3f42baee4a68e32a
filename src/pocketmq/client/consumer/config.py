"""What consumers are configured with, and the values they hand to listeners and callers."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from pocketmq.client.message import ConsumeStatus
from pocketmq.errors import InvalidArgumentError
from pocketmq.names import validate_stored_topic
from pocketmq.settings import check_non_negative, check_positive

__all__ = [
    "ConsumeContext",
    "ConsumerStatistics",
    "Listener",
    "MessageModel",
    "PushConsumerConfig",
    "QueueKey",
    "normalize_subscriptions",
]

Listener = Callable[..., ConsumeStatus | Awaitable[ConsumeStatus | None] | None]
"""A push consumer's listener: ``(messages)`` or ``(messages, context)``, sync or async."""

QueueKey = tuple[str, str, int]
"""A queue as consumers know it: ``(broker name, topic, queue id)``."""


class MessageModel(enum.Enum):
    """How a group's consumers share messages: each message to one consumer of the group
    (clustering), or every message to every consumer (broadcasting)."""

    CLUSTERING = "clustering"
    BROADCASTING = "broadcasting"


@dataclass(frozen=True, kw_only=True, slots=True)
class PushConsumerConfig:
    """How a push consumer pulls, calls its listener and keeps its progress.

    Defaults follow RocketMQ's push consumer (docs/semantics.md, "Consumer retry, delays and
    dead letters" and "Ordered messages"): ``batch_size`` messages per listener call,
    ``concurrency`` listener calls at once, ``pull_batch`` messages per pull, long polls of
    ``long_poll`` seconds, at most ``max_cached_per_queue`` messages and
    ``max_cached_bytes_per_queue`` bytes of bodies held per queue and at most ``max_span``
    offsets between the first unfinished message and the next to pull, offsets committed every
    ``offset_persist_interval`` seconds, a rebalance every ``rebalance_interval`` seconds (and
    at once when the group changes), failed messages that cannot be handed back consumed again
    after ``local_retry_delay`` seconds.
    ``orderly`` consumes each queue under its broker lock, one message group at a time.
    """

    model: MessageModel = MessageModel.CLUSTERING
    batch_size: int = 1
    concurrency: int = 16
    pull_batch: int = 32
    long_poll: float = 15.0
    consume_timeout: float = 900.0
    max_cached_per_queue: int = 1000
    max_cached_bytes_per_queue: int = 100 * 1024 * 1024
    """RocketMQ's ``pullThresholdSizeForQueue``: a queue stops being pulled while the bodies it
    holds (pulled, not yet finished; properties not counted, as in RocketMQ) add up to this many
    bytes. The pull that crosses it is kept, so a queue may hold this plus one pull's bodies."""
    max_span: int = 2000
    """RocketMQ's ``consumeConcurrentlyMaxSpan``: a message that does not finish holds the
    committed offset back, and a restart redelivers everything after it; past this many
    offsets the queue stops being pulled until it finishes."""
    offset_persist_interval: float = 5.0
    rebalance_interval: float = 20.0
    local_retry_delay: float = 5.0
    max_reconsume_times: int = -1
    offset_store_dir: str | None = None
    close_timeout: float = 10.0
    report_outcomes: bool = True
    """Tell the broker about successful attempts too (for ``pocketmq message history``)."""
    listener_thread: bool = True
    """Run a plain (not async) listener in a worker thread, so a blocking one never stalls
    pulling. ``False`` calls it on the event loop instead — no thread hop, task, future or await
    per message, several times cheaper — for listeners that never block; its consume timeout
    is then judged when it returns (a running function cannot be stopped)."""

    def __post_init__(self) -> None:
        """Refuse a setting that would make the consumer spin or silently never consume (a
        ``max_cached_per_queue`` of 0 stops every pull for good), at construction, naming it."""
        check_positive(
            self,
            "batch_size",
            "concurrency",
            "pull_batch",
            "long_poll",
            "consume_timeout",
            "max_cached_per_queue",
            "max_cached_bytes_per_queue",
            "max_span",
            "offset_persist_interval",
            "rebalance_interval",
        )
        check_non_negative(self, "local_retry_delay", "close_timeout")
        if self.max_reconsume_times < -1:
            raise InvalidArgumentError(
                "max_reconsume_times must be -1 (the group's own limit) or more, "
                f"not {self.max_reconsume_times!r}"
            )
        if self.max_span < self.pull_batch:
            raise InvalidArgumentError("max_span must be at least pull_batch")

    orderly: bool = False
    suspend_time: float = 1.0
    lock_renew_interval: float = 20.0


@dataclass(slots=True)
class ConsumeContext:
    """Passed to listeners that take a second argument.

    ``ack_index``: the index of the last message of the batch that succeeded when the listener
    returns SUCCESS (the rest are retried). ``delay_level``: 0 lets the broker choose the retry
    delay, a level 1-18 picks it, -1 sends the failed messages straight to the dead-letter queue.
    """

    ack_index: int
    delay_level: int = 0
    queue: tuple[str, str, int] = ("", "", 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerStatistics:
    """Counts since the consumer started, to see where messages went: consumed, failed
    (listener verdicts), sent back to the broker, re-sent to the retry topic, kept for a local
    re-consume, dropped (broadcasting never retries), dead-lettered by an orderly consumer; and
    the queues owned and the messages and bytes of bodies held now."""

    consumed: int
    failed: int
    sent_back: int
    resent: int
    local_retries: int
    dropped_broadcast_failures: int
    dead_lettered: int
    queues: int
    cached: int
    cached_bytes: int


def normalize_subscriptions(
    subscriptions: Mapping[str, str] | Sequence[str] | str,
) -> dict[str, str]:
    """``{topic: tag expression}`` from the forms consumers accept: one topic, a list of topics
    (every tag), or a mapping; topic names are checked before anything is sent."""
    if isinstance(subscriptions, str):
        normalized = {subscriptions: "*"}
    elif isinstance(subscriptions, Mapping):
        normalized = dict(subscriptions)
    else:
        normalized = {topic: "*" for topic in subscriptions}
    for topic in normalized:
        validate_stored_topic(topic)
    return normalized
