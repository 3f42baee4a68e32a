"""What an operator asks of a broker, computed from state it keeps anyway: how far behind each
group is (in messages and in time), what is in flight, blocked or dead-lettered, and the dead
letters themselves with why they died. The metrics endpoint and the dashboard both read it
(docs/operations.md); nothing here writes, and each call reads at most one message per lagging
queue plus a binary search per dead-letter queue.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from pocketmq import properties as props
from pocketmq.broker.consumers import Registration
from pocketmq.broker.topics import DLQ_PREFIX, RETRY_PREFIX, dlq_topic, retry_topic
from pocketmq.model.attempts import Attempt
from pocketmq.model.groups import GroupConfig
from pocketmq.store import GetStatus, MessageStore

if TYPE_CHECKING:
    from pocketmq.broker.broker import Broker

__all__ = [
    "DeadLetterRow",
    "GroupOverview",
    "GroupTotals",
    "PopProgress",
    "QueueProgress",
    "TopicTotals",
    "TrafficTotals",
    "committed_positions",
    "dead_letters",
    "disk_usage",
    "group_overview",
    "group_totals",
    "messages_since",
    "status",
    "stored_at",
    "topic_totals",
    "traffic_totals",
]

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue a group consumes: what is kept, where the group is, what it holds in flight."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    committed: int
    inflight: int
    blocked_fifo_groups: int

    @property
    def lag(self) -> int:
        """Messages stored and not yet consumed."""
        return max(0, self.max_offset - max(self.committed, self.min_offset))


@dataclass(slots=True)
class GroupOverview:
    """One consumer group as the dashboard's front page ranks it."""

    config: GroupConfig
    consumers: list[Registration]
    queues: list[QueueProgress]
    lag_latency_ms: int  # age of the oldest message not yet consumed (0: none waiting)
    dlq_depth: int
    dlq_last_hour: int
    redeliveries: int  # failed attempts recorded since the broker started
    retry_backlog: int = field(init=False)

    def __post_init__(self) -> None:
        self.retry_backlog = sum(
            q.lag + q.inflight for q in self.queues if q.topic.startswith(RETRY_PREFIX)
        )

    @property
    def name(self) -> str:
        """The group's name."""
        return self.config.name

    @property
    def lag(self) -> int:
        """Messages waiting across its topics, its retry topic included."""
        return sum(q.lag for q in self.queues)

    @property
    def inflight(self) -> int:
        """Messages popped and not acknowledged."""
        return sum(q.inflight for q in self.queues)

    @property
    def blocked_fifo_groups(self) -> int:
        """FIFO message groups held behind a message in flight."""
        return sum(q.blocked_fifo_groups for q in self.queues)

    def trouble(self) -> tuple[int, int, int, int, int]:
        """The front page's order, worst first: dead letters this hour, then failing deliveries
        waiting to be retried, blocked FIFO groups, how old the backlog is, how long it is."""
        return (
            self.dlq_last_hour,
            self.retry_backlog,
            self.blocked_fifo_groups,
            self.lag_latency_ms,
            self.lag,
        )


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """One dead letter with where it came from and why it is there."""

    dlq_offset: int
    message_id: str
    origin_topic: str
    tag: str
    keys: str
    reason: str
    attempts: int
    stored_at_ms: int
    body: bytes
    properties: dict[str, str]
    redriven: bool
    last_error: str = ""


class PopProgress(NamedTuple):
    """A pop queue's state as operators see it."""

    inflight: int  # handed out, not acknowledged
    blocked: int  # FIFO message groups held behind one in flight
    next_offset: int  # the first message never read for the group
    parked: tuple[int, ...] = ()  # FIFO: read but held back behind their group (offsets)


def committed_positions(
    broker: Broker,
) -> tuple[dict[tuple[str, str, int], int], dict[tuple[str, str, int], PopProgress]]:
    """Per (group, topic, queue): the consumed position (committed offsets and pop progress, the
    further of the two), and pop state's progress."""
    committed: dict[tuple[str, str, int], int] = dict(broker.offsets.snapshot())
    pops: dict[tuple[str, str, int], PopProgress] = {}
    for key, state in broker.pop_state.items():
        committed[key] = max(committed.get(key, 0), state.committed)
        pops[key] = PopProgress(
            len(state.inflight), state.blocked_groups(), state.next_offset, tuple(state.parked)
        )
    return committed, pops


def group_overviews(broker: Broker) -> list[GroupOverview]:
    """Every group, worst trouble first (:meth:`GroupOverview.trouble`)."""
    committed, pops = committed_positions(broker)
    by_group: dict[str, list[tuple[str, int]]] = {}
    for group, topic, queue_id in set(committed) | set(pops):
        by_group.setdefault(group, []).append((topic, queue_id))
    overviews = [
        _overview(broker, config, by_group.get(config.name, []), committed, pops)
        for config in broker.groups.all()
    ]
    return sorted(overviews, key=lambda o: (o.trouble(), o.name), reverse=True)


def group_overview(broker: Broker, name: str) -> GroupOverview:
    """One group (:class:`~pocketmq.errors.GroupNotFoundError` when it does not exist)."""
    config = broker.groups.require(name)
    committed, pops = committed_positions(broker)
    queues = [(t, q) for (g, t, q) in set(committed) | set(pops) if g == name]
    retry = retry_topic(name)
    retry_config = broker.topics.get(retry)
    if retry_config is not None:
        queues += [(retry, q) for q in range(retry_config.queues) if (retry, q) not in queues]
    return _overview(broker, config, queues, committed, pops)


def _overview(
    broker: Broker,
    config: GroupConfig,
    queues: list[tuple[str, int]],
    committed: dict[tuple[str, str, int], int],
    pops: dict[tuple[str, str, int], PopProgress],
) -> GroupOverview:
    store = broker.store
    now_ms = int(broker._clock() * 1000)
    rows = []
    oldest = 0
    for topic, queue_id in sorted(queues):
        if topic.startswith(DLQ_PREFIX) or broker.topics.get(topic) is None:
            continue
        key = (config.name, topic, queue_id)
        progress = pops.get(key)
        inflight, blocked = (progress.inflight, progress.blocked) if progress else (0, 0)
        row = QueueProgress(
            topic,
            queue_id,
            store.min_offset(topic, queue_id),
            store.max_offset(topic, queue_id),
            committed.get(key, -1),
            inflight,
            blocked,
        )
        rows.append(row)
        if row.lag:
            stored = stored_at(store, topic, queue_id, max(row.committed, row.min_offset))
            if stored:
                oldest = max(oldest, now_ms - stored)
    dlq = dlq_topic(config.name)
    depth = last_hour = 0
    dlq_config = broker.topics.get(dlq)
    if dlq_config is not None:
        for queue_id in range(dlq_config.queues):
            depth += store.max_offset(dlq, queue_id) - store.min_offset(dlq, queue_id)
            last_hour += messages_since(store, dlq, queue_id, now_ms - HOUR_MS)
    failed = sum(
        count
        for (outcome, group), count in broker.history.outcomes.items()
        if group == config.name and outcome not in ("SUCCESS", "DLQ", "REDRIVEN")
    )
    return GroupOverview(
        config, broker.consumers.members(config.name), rows, oldest, depth, last_hour, failed
    )


def stored_at(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """The store time (ms) of the message at ``offset``, or 0 when it cannot be read."""
    got = store.get_messages(topic, queue_id, offset, max_count=1)
    if got.status is not GetStatus.FOUND or not got.messages:
        return 0
    return got.messages[0].store_timestamp


def messages_since(store: MessageStore, topic: str, queue_id: int, since_ms: int) -> int:
    """How many messages of a queue were stored at or after ``since_ms`` (store times only grow
    along a queue: a binary search)."""
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    end = high
    while low < high:
        middle = (low + high) // 2
        stored = stored_at(store, topic, queue_id, middle)
        if stored == 0 or stored >= since_ms:
            high = middle
        else:
            low = middle + 1
    return end - low


def dead_letters(broker: Broker, group: str) -> Iterator[DeadLetterRow]:
    """The dead letters of ``group``, newest first, lazily (the caller filters and pages)."""
    store = broker.store
    topic = dlq_topic(group)
    config = broker.topics.get(topic)
    if config is None:
        return
    done = broker.redriven(group)
    for queue_id in range(config.queues):
        low = store.min_offset(topic, queue_id)
        offset = store.max_offset(topic, queue_id)
        while offset > low:
            start = max(low, offset - 64)
            got = store.get_messages(topic, queue_id, start, max_count=offset - start)
            for message in reversed(got.messages):
                properties = dict(message.properties)
                yield DeadLetterRow(
                    message.queue_offset,
                    message.message_id,
                    properties.get(props.RETRY_TOPIC) or properties.get(props.REAL_TOPIC) or "",
                    properties.get(props.TAGS, ""),
                    properties.get(props.KEYS, ""),
                    properties.get(props.DLQ_REASON, ""),
                    message.reconsume_times + 1,
                    message.store_timestamp,
                    message.body,
                    properties,
                    message.queue_offset in done,
                )
            if not got.messages:
                break
            offset = start


def last_error(attempts: list[Attempt], group: str) -> str:
    """The error the group's consumer gave on its last failed attempt of a message, from its
    history (the dead-lettering entry itself only repeats the reason)."""
    for attempt in reversed(attempts):
        if attempt.group == group and attempt.error and attempt.outcome not in ("DLQ", "REDRIVEN"):
            return attempt.error
    return ""


# -- totals: cheap reads for the history sampler and the cluster view -------------------------
#
# These read offsets and counters only (never a message), so a timer may call them every few
# seconds on a busy broker (docs/operations.md, "Charts": the cost measured).


@dataclass(frozen=True, slots=True)
class GroupTotals:
    """One group's figures summed over its queues: what the charts and the cluster view show."""

    name: str
    lag: int  # stored, not consumed, over its topics (its retry topic included)
    dlq_depth: int
    retry_backlog: int  # waiting in its retry topic or in flight from it
    inflight: int
    consumers: int
    topics: tuple[str, ...]  # the topics it has positions on (its retry topic excluded)


@dataclass(frozen=True, slots=True)
class TopicTotals:
    """One user topic: its queues, the messages kept, the messages stored since start."""

    name: str
    topic_type: str
    queues: int
    stored: int
    messages_in: int


@dataclass(frozen=True, slots=True)
class TrafficTotals:
    """Messages and body bytes stored and delivered since the broker started, over every topic
    (retry topics included: a retry is stored and delivered again), and messages stored per
    topic."""

    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    by_topic: dict[str, int] = field(default_factory=dict)


def group_totals(broker: Broker) -> list[GroupTotals]:
    """Every group with its lag, dead letters, retry backlog and in-flight count, by name."""
    store = broker.store
    committed, pops = committed_positions(broker)
    sums: dict[str, list[int]] = {}  # group -> [lag, retry backlog, inflight]
    topics: dict[str, set[str]] = {}
    for key in set(committed) | set(pops):
        group, topic, queue_id = key
        if topic.startswith(DLQ_PREFIX) or broker.topics.get(topic) is None:
            continue
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        lag = max(0, high - max(committed.get(key, -1), low))
        progress = pops.get(key)
        inflight = progress.inflight if progress is not None else 0
        figures = sums.setdefault(group, [0, 0, 0])
        figures[0] += lag
        figures[2] += inflight
        if topic.startswith(RETRY_PREFIX):
            figures[1] += lag + inflight
        else:
            topics.setdefault(group, set()).add(topic)
    out = []
    for config in sorted(broker.groups.all(), key=lambda g: g.name):
        lag, backlog, inflight = sums.get(config.name, (0, 0, 0))
        out.append(
            GroupTotals(
                config.name,
                lag,
                _depth(broker, dlq_topic(config.name)),
                backlog,
                inflight,
                len(broker.consumers.members(config.name)),
                tuple(sorted(topics.get(config.name, ()))),
            )
        )
    return out


def _depth(broker: Broker, topic: str) -> int:
    config = broker.topics.get(topic)
    if config is None:
        return 0
    store = broker.store
    return sum(
        store.max_offset(topic, q) - store.min_offset(topic, q) for q in range(config.queues)
    )


def topic_totals(broker: Broker) -> list[TopicTotals]:
    """Every user topic (not the broker's own, retry or dead-letter ones), by name."""
    counts = broker.traffic.messages_in
    out = []
    for config in sorted(broker.topics.all(), key=lambda t: t.name):
        if config.system or config.name.startswith((DLQ_PREFIX, RETRY_PREFIX)):
            continue
        out.append(
            TopicTotals(
                config.name,
                config.topic_type.value,
                config.queues,
                _depth(broker, config.name),
                counts.get(config.name, 0),
            )
        )
    return out


def traffic_totals(broker: Broker) -> TrafficTotals:
    """What came in and went out since the broker started (:class:`TrafficTotals`)."""
    traffic = broker.traffic
    by_topic = traffic.messages_in
    return TrafficTotals(
        sum(by_topic.values()),
        sum(traffic.bytes_in.values()),
        sum(traffic.messages_out.values()),
        sum(traffic.bytes_out.values()),
        by_topic,
    )


def disk_usage(broker: Broker) -> tuple[int, int]:
    """Free and total bytes of the disk holding the data directory ((-1, -1) when it cannot be
    read)."""
    try:
        usage = shutil.disk_usage(broker.config.data_dir)
    except OSError:
        return -1, -1
    return usage.free, usage.total


def status(broker: Broker) -> dict[str, object]:
    """``BROKER_STATUS``'s figures (counters, store and disk, replication, uptime): the one read
    the HTTP side and the native port share, so their answers never disagree."""
    return broker.status()
