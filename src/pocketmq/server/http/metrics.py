"""``/metrics``: the broker's state as Prometheus series, computed when Prometheus scrapes.

Names, labels and units follow RocketMQ 5's metrics where it has one (so its Grafana dashboards
work), ``pocketmq_*`` otherwise; every series is listed in docs/operations.md, "Metrics". Nothing
here runs on the message path: the collector reads counters and offsets the broker keeps anyway,
so a scrape costs one pass over the topics and groups.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pocketmq.broker import Broker
from pocketmq.broker.overview import (
    PopProgress,
    committed_positions,
    depth,
    disk_usage,
    reliability_figures,
    stored_at,
)
from pocketmq.broker.overview import traffic as overview_traffic
from pocketmq.broker.topics import DLQ_PREFIX, RETRY_PREFIX
from pocketmq.broker.traffic import SIZE_BUCKETS
from pocketmq.server.auth.failures import FAILURES
from pocketmq.server.rpcstats import LATENCY_BUCKETS_MS, RpcLatency
from pocketmq.version import VERSION

__all__ = ["BrokerCollector", "Connections", "rpc_latency_family"]

_REDELIVERED = frozenset({"RECONSUME_LATER", "EXCEPTION", "TIMEOUT", "INVISIBLE_EXPIRED"})


@dataclass(frozen=True, slots=True)
class Connections:
    """Clients connected now, by kind, protocol (``native`` or ``grpc``) and language."""

    producers: dict[tuple[str, str], int]
    consumers: dict[tuple[str, str], int]


def rpc_latency_family(latencies: Iterable[RpcLatency]) -> Metric:
    """``rocketmq_rpc_latency`` from the answer times counted by each port (a broker's native
    and gRPC ports, or a proxy's gRPC port)."""
    family = HistogramMetricFamily(
        "rocketmq_rpc_latency",
        "Time to answer a request (ms; long polls count their wait)",
        labels=["protocol_type", "request_code", "response_code"],
    )
    bounds = [*(str(b) for b in LATENCY_BUCKETS_MS), "+Inf"]
    for latency in latencies:
        for key, counts in sorted(latency.counts.items()):
            cumulative = list(itertools.accumulate(counts))
            family.add_metric(
                list(key), list(zip(bounds, cumulative, strict=True)), latency.sums_ms[key]
            )
    return family


class BrokerCollector(Collector):
    """Every series of one broker (module doc)."""

    def __init__(
        self,
        broker: Broker,
        connections: Callable[[], Connections],
        last_scrape: Callable[[], float] = lambda: 0.0,
        latencies: Callable[[], list[RpcLatency]] = list,
    ) -> None:
        self._broker = broker
        self._connections = connections
        self._last_scrape = last_scrape
        self._latencies = latencies

    def collect(self) -> Iterator[Metric]:
        """The series as of now."""
        broker = self._broker
        yield from self._identity()
        yield from self._traffic()
        yield from self._consumers()
        yield from self._storage()
        yield from self._reliability()
        yield from self._replication()
        connections = self._connections()
        for kind, counts in (
            ("producer", connections.producers),
            ("consumer", connections.consumers),
        ):
            family = GaugeMetricFamily(
                f"rocketmq_{kind}_connections",
                f"{kind.title()} connections",
                labels=["protocol", "language"],
            )
            for (protocol, language), count in sorted(counts.items()):
                family.add_metric([protocol, language], count)
            yield family
        yield self._rpc_latency()
        lag = GaugeMetricFamily(
            "pocketmq_event_loop_lag_seconds", "How late the broker's event loop ran a timer"
        )
        lag.add_metric([], reliability_figures(broker).loop_lag)
        yield lag
        scrape = GaugeMetricFamily(
            "pocketmq_scrape_seconds", "How long the previous scrape held the event loop"
        )
        scrape.add_metric([], self._last_scrape())
        yield scrape

    def _rpc_latency(self) -> Metric:
        return rpc_latency_family(self._latencies())

    def _identity(self) -> Iterator[Metric]:
        broker = self._broker
        info = InfoMetricFamily("pocketmq_build", "The broker's version, group and role")
        info.add_metric(
            [],
            {
                "version": VERSION,
                "broker_name": broker.name,
                "broker_id": str(broker.config.broker_id),
                "role": broker.ha.replication.acting_role(),
            },
        )
        yield info

    def _traffic(self) -> Iterator[Metric]:
        traffic = overview_traffic(self._broker)
        labels_in = ["topic", "message_type", "is_retry"]
        messages_in = CounterMetricFamily(
            "rocketmq_messages_in", "Messages stored", labels=labels_in
        )
        bytes_in = CounterMetricFamily(
            "rocketmq_throughput_in", "Message body bytes stored", labels=labels_in
        )
        topic_of = self._broker.topic
        stored_bytes = traffic.bytes_in  # a fresh dict per read: take it once per scrape
        for topic, count in sorted(traffic.messages_in.items()):
            retry = str(topic.startswith(RETRY_PREFIX)).lower()
            config = topic_of(topic)
            kind = config.topic_type.value if config is not None else "normal"
            messages_in.add_metric([topic, kind, retry], count)
            bytes_in.add_metric([topic, kind, retry], stored_bytes[topic])
        yield messages_in
        yield bytes_in
        labels = ["topic", "consumer_group", "is_retry"]
        messages_out = CounterMetricFamily(
            "rocketmq_messages_out", "Messages delivered to consumers", labels=labels
        )
        bytes_out = CounterMetricFamily(
            "rocketmq_throughput_out", "Message body bytes delivered", labels=labels
        )
        for (topic, group), count in sorted(traffic.messages_out.items()):
            retry = str(topic.startswith(RETRY_PREFIX)).lower()
            messages_out.add_metric([topic, group, retry], count)
            bytes_out.add_metric([topic, group, retry], traffic.bytes_out[(topic, group)])
        yield messages_out
        yield bytes_out
        sizes = HistogramMetricFamily(
            "rocketmq_message_size", "Message body sizes (bytes)", labels=["topic", "message_type"]
        )
        for topic, counts in sorted(traffic.sizes.items()):
            config = topic_of(topic)
            kind = config.topic_type.value if config is not None else "normal"
            cumulative, buckets = 0, []
            for bound, count in zip((*SIZE_BUCKETS, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append((str(float(bound)) if bound != float("inf") else "+Inf", cumulative))
            sizes.add_metric([topic, kind], buckets, stored_bytes[topic])
        yield sizes
        dead = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a dead-letter queue",
            labels=["topic", "consumer_group"],
        )
        for (topic, group), count in sorted(traffic.dead_lettered.items()):
            dead.add_metric([topic, group], count)
        yield dead

    def _consumers(self) -> Iterator[Metric]:
        """Lag per (topic, group) from committed offsets and pop progress, in-flight pops, and
        each dead-letter queue's depth."""
        broker = self._broker
        committed, pops = committed_positions(broker)
        inflight: dict[tuple[str, str], int] = {}
        blocked: dict[tuple[str, str], int] = {}
        for (group, topic, _), progress in pops.items():
            inflight[(topic, group)] = inflight.get((topic, group), 0) + progress.inflight
            if progress.blocked:
                blocked[(topic, group)] = blocked.get((topic, group), 0) + progress.blocked
        backlog = _Backlog(broker, committed, pops)
        yield _by_topic_and_group(
            "rocketmq_consumer_lag_messages",
            "Messages stored but not yet consumed (committed) by the group",
            backlog.lag,
        )
        yield _by_topic_and_group(
            "rocketmq_consumer_lag_latency",
            "How long the oldest message not yet consumed by the group has waited (ms)",
            backlog.oldest,
        )
        yield _by_topic_and_group(
            "rocketmq_consumer_ready_messages",
            "Messages stored and not yet handed out to the group (pop: never delivered, FIFO "
            "ones held behind their group included; pull: past the committed offset)",
            backlog.ready,
        )
        yield _by_topic_and_group(
            "rocketmq_consumer_queueing_latency",
            "How long the oldest ready message has waited since it was stored (ms)",
            backlog.queueing,
        )
        yield _by_topic_and_group(
            "rocketmq_consumer_inflight_messages",
            "Messages popped and not yet acknowledged",
            inflight,
        )
        yield _by_topic_and_group(
            "pocketmq_fifo_blocked_message_groups",
            "FIFO message groups whose next messages wait behind one in flight",
            blocked,
        )
        family = GaugeMetricFamily(
            "pocketmq_dlq_messages",
            "Messages in the group's dead-letter queue",
            labels=["consumer_group"],
        )
        for config in broker.list_topics():
            if config.name.startswith(DLQ_PREFIX):
                family.add_metric([config.name[len(DLQ_PREFIX) :]], depth(broker, config.name))
        yield family

    def _storage(self) -> Iterator[Metric]:
        stats = self._broker.store_statistics()
        for name, value, text in (
            ("pocketmq_store_written_bytes", stats.write_position, "End of the commit log"),
            ("pocketmq_store_flushed_bytes", stats.flushed_position, "Flushed to disk up to"),
            (
                "pocketmq_store_flush_behind_bytes",
                stats.write_position - stats.flushed_position,
                "Written but not yet flushed",
            ),
            ("pocketmq_store_segments", stats.segments, "Commit-log segment files"),
            ("pocketmq_store_queues", stats.queues, "Consume queues"),
        ):
            family = GaugeMetricFamily(name, text)
            family.add_metric([], value)
            yield family
        available, total = disk_usage(self._broker)
        if total >= 0:  # -1: the directory cannot be read (no series rather than a lie)
            for name, value, text in (
                ("pocketmq_disk_free_bytes", available, "Free space on the data directory's disk"),
                ("pocketmq_disk_size_bytes", total, "Size of the data directory's disk"),
            ):
                family = GaugeMetricFamily(name, text)
                family.add_metric([], value)
                yield family
        failed = GaugeMetricFamily(
            "pocketmq_store_failed", "1 when the store refuses writes after a disk failure"
        )
        failed.add_metric([], 1 if stats.failure else 0)
        yield failed
        full = GaugeMetricFamily(
            "pocketmq_store_disk_full",
            "1 while the free-space guard refuses writes (min_free_disk_bytes, or a disk that "
            "ran out of space)",
        )
        full.add_metric([], 1 if stats.refusing_writes else 0)
        yield full
        free = GaugeMetricFamily(
            "pocketmq_store_disk_free_bytes", "Free bytes on the store's file system (-1: unknown)"
        )
        free.add_metric([], stats.disk_free_bytes)
        yield free

    def _reliability(self) -> Iterator[Metric]:
        figures = reliability_figures(self._broker)
        counters = figures.counters
        half = GaugeMetricFamily(
            "rocketmq_half_messages", "Transactions awaiting commit or rollback"
        )
        half.add_metric([], figures.half_messages)
        yield half
        for name, key, text in (
            ("pocketmq_transactions_committed", "transactions_committed", "Transactions committed"),
            (
                "pocketmq_transactions_rolled_back",
                "transactions_discarded",
                "Transactions rolled back",
            ),
            ("pocketmq_consumer_acks", "acks", "Pop acknowledgements"),
            ("pocketmq_sent_back", "sent_back", "Messages handed back for a retry"),
        ):
            family = CounterMetricFamily(name, text)
            family.add_metric([], counters[key])
            yield family
        scheduled = GaugeMetricFamily(
            "pocketmq_retry_scheduled_messages",
            "Delayed and retry messages waiting, by delay level (timer: exact times)",
            labels=["delay_level"],
        )
        for level, count in sorted(figures.scheduled.items()):
            scheduled.add_metric([level.removeprefix("level_")], count)
        yield scheduled
        outcomes = CounterMetricFamily(
            "pocketmq_delivery_attempts",
            "Delivery attempts by how they ended (native and gRPC, push and pop)",
            labels=["consumer_group", "outcome"],
        )
        redeliveries = CounterMetricFamily(
            "pocketmq_redeliveries",
            "Attempts that failed and will be delivered again (or dead-lettered)",
            labels=["consumer_group", "outcome"],
        )
        redriven = CounterMetricFamily(
            "pocketmq_dlq_redriven",
            "Dead letters sent back for delivery",
            labels=["consumer_group"],
        )
        for (outcome, group), count in sorted(figures.outcomes.items()):
            outcomes.add_metric([group, outcome.lower()], count)
            if outcome in _REDELIVERED:
                redeliveries.add_metric([group, outcome.lower()], count)
            elif outcome == "REDRIVEN":
                redriven.add_metric([group], count)
        yield outcomes
        yield redeliveries
        yield redriven
        dropped = CounterMetricFamily(
            "pocketmq_history_dropped",
            "Reported attempts counted but not stored: the history's intake was full",
        )
        dropped.add_metric([], figures.history_dropped)
        yield dropped
        rejected = CounterMetricFamily(
            "pocketmq_flow_control_rejections", "Sends refused by flow control"
        )
        rejected.add_metric([], figures.flow_rejected)
        yield rejected
        refused = CounterMetricFamily(
            "pocketmq_auth_failures",
            "Requests refused for their credentials or by the ACL",
            labels=["protocol", "reason"],
        )
        for (protocol, reason), number in sorted(FAILURES.items()):
            refused.add_metric([protocol, reason], number)
        yield refused

    def _replication(self) -> Iterator[Metric]:
        replication = self._broker.ha.replication
        for name, value, text in (
            ("pocketmq_replication_lag_bytes", replication.lag_bytes(), "Slowest slave's distance"),
            ("pocketmq_replication_in_sync_slaves", len(replication.in_sync()), "Slaves in sync"),
            ("pocketmq_replication_slave_gap_bytes", max(0, replication.gap()), "A slave's gap"),
        ):
            family = GaugeMetricFamily(name, text)
            family.add_metric([], value)
            yield family
        controller = replication.controller()
        failovers = CounterMetricFamily(
            "pocketmq_failovers", "Times this broker was elected master by the controller"
        )
        failovers.add_metric([], int(str(controller.get("failovers", 0))))
        yield failovers
        last = GaugeMetricFamily(
            "pocketmq_last_failover_seconds", "From the old master's last word to this promotion"
        )
        last.add_metric([], float(str(controller.get("last_failover_seconds", 0.0))))
        yield last


def _by_topic_and_group(name: str, text: str, figures: dict[tuple[str, str], int]) -> Metric:
    """A gauge with one series per (topic, consumer group), in sorted order."""
    family = GaugeMetricFamily(name, text, labels=["topic", "consumer_group"])
    for (topic, group), value in sorted(figures.items()):
        family.add_metric([topic, group], value)
    return family


class _Backlog:
    """What each (topic, group) has not consumed yet, from committed offsets and pop progress:
    ``lag`` (messages not committed) and ``oldest`` (the age of the oldest of them, ms), ``ready``
    (stored and not handed out yet) and ``queueing`` (the age of the oldest of those, ms)."""

    def __init__(
        self,
        broker: Broker,
        committed: dict[tuple[str, str, int], int],
        pops: dict[tuple[str, str, int], PopProgress],
    ) -> None:
        self._broker = broker
        self._now_ms = int(time.time() * 1000)
        self._ages: dict[tuple[str, int, int], int] = {}  # lag and queueing often ask the same
        self.lag: dict[tuple[str, str], int] = {}
        self.oldest: dict[tuple[str, str], int] = {}
        self.ready: dict[tuple[str, str], int] = {}
        self.queueing: dict[tuple[str, str], int] = {}
        for (group, topic, queue_id), offset in committed.items():
            if not topic.startswith((DLQ_PREFIX,)):
                self._add(group, topic, queue_id, offset, pops.get((group, topic, queue_id)))

    def _add(
        self, group: str, topic: str, queue_id: int, offset: int, popped: PopProgress | None
    ) -> None:
        key, end = (topic, group), self._broker.queue_range(topic, queue_id)[1]
        behind = max(0, end - offset)
        self.lag[key] = self.lag.get(key, 0) + behind
        # one read per lagging queue: its oldest message's store time
        age = self._age_at(topic, queue_id, offset) if behind else 0
        self.oldest[key] = max(self.oldest.get(key, 0), age)
        unread = max(popped.next_offset if popped is not None else offset, offset)
        parked = popped.parked if popped is not None else ()
        waiting = max(0, end - unread) + len(parked)
        self.ready[key] = self.ready.get(key, 0) + waiting
        first = min((*parked, unread))
        age = self._age_at(topic, queue_id, first) if waiting else 0
        self.queueing[key] = max(self.queueing.get(key, 0), age)

    def _age_at(self, topic: str, queue_id: int, offset: int) -> int:
        broker = self._broker
        position = (topic, queue_id, max(offset, broker.queue_range(topic, queue_id)[0]))
        age = self._ages.get(position)
        if age is None:
            stored = stored_at(broker, *position)
            age = self._ages[position] = max(0, self._now_ms - stored) if stored else 0
        return age
