"""The timer that feeds the dashboard's charts (history.py): every ``history_interval`` seconds
(10 by default) one reading of the broker, never anything per message.

A reading is the broker's rate of messages in and out (from its counters: the difference since
the last reading over the time between them), its CPU (the process's CPU time over the same
time, in percent of one core), the disk used under its data directory, and per consumer group its
lag, dead letters and retry backlog (:func:`pocketmq.broker.overview.group_totals`: offsets and
counters only, no message read). Measured cost: docs/operations.md, "Charts".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pocketmq.broker import Broker
from pocketmq.broker.overview import disk_usage, group_totals, traffic_totals
from pocketmq.server.http.history import History, SeriesKey

__all__ = ["BROKER_SERIES", "GROUP_SERIES", "HistoryCollector", "Latest", "Sampler"]

log = logging.getLogger("pocketmq.server.http")
_NAN = float("nan")

BROKER_SERIES: tuple[str, ...] = ("in", "out", "cpu", "disk_used")
"""The broker's own series: messages/s in and out, CPU (% of a core), disk used (bytes)."""
GROUP_SERIES: tuple[str, ...] = ("lag", "dlq", "retry")
"""Each group's series: lag (messages), dead letters, retry backlog."""


@dataclass(frozen=True, slots=True)
class Latest:
    """The last reading's rates (the cluster view shows them): -1 before the second reading."""

    rate_in: float = -1.0
    rate_out: float = -1.0
    cpu_percent: float = -1.0


class Sampler:
    """Reads the broker into ``history`` on a timer (module doc); the clocks are injectable so
    tests drive it without waiting."""

    def __init__(
        self,
        broker: Broker,
        history: History,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self._broker = broker
        self.history = history
        self._monotonic = monotonic
        self._wall = wall
        self._cpu = cpu
        self._previous: tuple[float, float, int, int] | None = None  # when, cpu, in, out
        self.latest = Latest()
        self.busy_seconds = 0.0  # time spent sampling since start (what the history costs)
        self.last_seconds = 0.0  # how long the last sample held the event loop
        self._topic_counts: dict[str, int] = {}
        self.topic_rates: dict[str, float] = {}  # messages/s per topic at the last reading
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        """Take one reading and append it to the history (timed: :attr:`busy_seconds`)."""
        started = time.perf_counter()
        try:
            self._sample()
        finally:
            self.last_seconds = time.perf_counter() - started
            self.busy_seconds += self.last_seconds

    def _sample(self) -> None:
        broker = self._broker
        now, cpu = self._monotonic(), self._cpu()
        traffic = traffic_totals(broker)
        counts = traffic.by_topic
        # the broker's series first and always (a gap when unknown): they are never refused
        values: dict[SeriesKey, float] = {(name, ""): _NAN for name in BROKER_SERIES}
        previous, self._previous = (
            self._previous,
            (now, cpu, traffic.messages_in, traffic.messages_out),
        )
        if previous is not None and now > previous[0]:
            elapsed = now - previous[0]
            self.latest = Latest(
                round((traffic.messages_in - previous[2]) / elapsed, 2),
                round((traffic.messages_out - previous[3]) / elapsed, 2),
                round(100 * (cpu - previous[1]) / elapsed, 2),
            )
            self.topic_rates = {
                topic: round((count - self._topic_counts.get(topic, 0)) / elapsed, 2)
                for topic, count in counts.items()
            }
            values[("in", "")] = self.latest.rate_in
            values[("out", "")] = self.latest.rate_out
            values[("cpu", "")] = self.latest.cpu_percent
        self._topic_counts = counts
        free, total = disk_usage(broker)
        if total >= 0:
            values[("disk_used", "")] = total - free
        for group in group_totals(broker):
            values[("lag", group.name)] = group.lag
            values[("dlq", group.name)] = group.dlq_depth
            values[("retry", group.name)] = group.retry_backlog
        self.history.record(self._wall(), values)

    def start(self) -> None:
        """Sample every ``history.step`` seconds until :meth:`close`."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="history-sampler")

    async def _run(self) -> None:
        step = self.history.step
        next_at = self._monotonic()
        while True:
            try:
                self.sample()
            except Exception:  # a chart with a gap, never a broker without its timer
                log.exception("history sample failed")
            # on a fixed beat (a late round does not shift the next ones)
            next_at += step
            delay = next_at - self._monotonic()
            if delay < 0:
                next_at = self._monotonic() + step
                delay = step
            await asyncio.sleep(delay)

    async def close(self) -> None:
        """Stop sampling."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class HistoryCollector(Collector):
    """``pocketmq_chart_series`` and ``pocketmq_chart_series_refused``: how full the charts'
    history is, and how many series it could not record at its last sample;
    ``pocketmq_chart_sample_seconds_total``: the time spent sampling, what the history costs
    (docs/operations.md, "Charts")."""

    def __init__(self, sampler: Sampler) -> None:
        self._sampler = sampler
        self._history = sampler.history

    def collect(self) -> Iterator[Metric]:
        """The two gauges as of now."""
        recorded = GaugeMetricFamily(
            "pocketmq_chart_series", "Series the dashboard's charts record"
        )
        recorded.add_metric([], len(self._history.recorded()))
        yield recorded
        refused = GaugeMetricFamily(
            "pocketmq_chart_series_refused",
            "Series not recorded at the last sample: history_max_series reached",
        )
        refused.add_metric([], self._history.refused)
        yield refused
        busy = CounterMetricFamily(
            "pocketmq_chart_sample_seconds",
            "Time the charts' sampler has held the event loop since the broker started",
        )
        busy.add_metric([], self._sampler.busy_seconds)
        yield busy
