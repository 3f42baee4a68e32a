"""The dashboard's memory of the last hour and the last day: a ring buffer per series.

Every number of the dashboard is "now"; its charts need the minutes before. A timer samples the
broker (``sampler.py``) and appends one point to every series at once, so all series share one
time axis per tier:

- the **hour** tier keeps :data:`FINE_POINTS` (360) points, one per sample (every 10 s by
  default: an hour);
- the **day** tier keeps :data:`COARSE_POINTS` (288) points, each the mean of
  :data:`COARSE_EVERY` (30) fine points (5 minutes by default: a day).

Memory is fixed whatever the traffic: per series, 648 single-precision floats (2.6 KB) plus a
small object, and at most ``max_series`` series (1,000 by default, ~2.8 MB measured, docs/
operations.md "Charts"). The broker's own series are always kept; a group's series is created at
its first sample while there is room, and **refused** when there is none — the series that exist
keep their history, so a chart never loses its past to a newcomer; refusals are counted
(``pocketmq_chart_series_refused``). A group that is deleted loses its series at the next
sample, which makes room. Nothing is written to disk: a restarted broker starts an empty
history (the long view is Prometheus's job, ``contrib/grafana/``).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "COARSE_EVERY",
    "COARSE_POINTS",
    "DEFAULT_MAX_SERIES",
    "FINE_POINTS",
    "History",
    "SeriesKey",
    "Tier",
]

FINE_POINTS: Final = 360
"""Points of the hour tier (an hour at the default 10 s interval)."""
COARSE_EVERY: Final = 30
"""Fine points averaged into one point of the day tier (5 minutes at the default interval)."""
COARSE_POINTS: Final = 288
"""Points of the day tier (a day at the default interval)."""
DEFAULT_MAX_SERIES: Final = 1000

SeriesKey = tuple[str, str]
"""``(kind, subject)``: ``("in", "")`` for the broker's rate in, ``("lag", "orders")`` for a
group's lag."""

_NAN: Final = float("nan")


class Tier:
    """One time axis and a ring of values per series on it (``points`` long, oldest overwritten)."""

    def __init__(self, points: int, step: float) -> None:
        self.points = points
        self.step = step  # seconds between points
        self.times = array("d", [_NAN]) * points
        self.values: dict[SeriesKey, array[float]] = {}
        self.head = 0  # where the next point goes
        self.count = 0  # points written (at most ``points``)
        self._blank = array("f", [_NAN]) * points

    def append(self, at: float, values: Mapping[SeriesKey, float]) -> None:
        """One point of every series at time ``at``; a series without a value gets a gap."""
        head = self.head
        self.times[head] = at
        for key, ring in self.values.items():
            ring[head] = values.get(key, _NAN)
        self.head = (head + 1) % self.points
        self.count = min(self.count + 1, self.points)

    def add(self, key: SeriesKey) -> None:
        """A new series, empty (gaps) before now."""
        self.values[key] = array("f", self._blank)

    def drop(self, key: SeriesKey) -> None:
        """Forget a series."""
        self.values.pop(key, None)

    def _order(self) -> list[int]:
        start = (self.head - self.count) % self.points
        return [(start + i) % self.points for i in range(self.count)]

    def read(self, keys: Iterable[SeriesKey]) -> tuple[list[float], dict[SeriesKey, list[float]]]:
        """The times (oldest first) and each asked series' values on them (NaN: a gap; a series
        never recorded is all gaps)."""
        order = self._order()
        times = [self.times[i] for i in order]
        out: dict[SeriesKey, list[float]] = {}
        for key in keys:
            ring = self.values.get(key)
            out[key] = [ring[i] for i in order] if ring is not None else [_NAN] * len(order)
        return times, out

    def last(self, n: int) -> dict[SeriesKey, list[float]]:
        """Each series' last ``n`` values (fewer when fewer were written)."""
        n = min(n, self.count)
        slots = [(self.head - n + i) % self.points for i in range(n)]
        return {key: [ring[i] for i in slots] for key, ring in self.values.items()}


@dataclass(frozen=True, slots=True)
class Reading:
    """A series' points in one tier, as the JSON API gives them."""

    step: float
    times: list[float]
    series: dict[SeriesKey, list[float]]


class History:
    """Every recorded series over the two tiers (module doc). ``step`` is the sampling interval
    in seconds (at most 10, so the hour tier's resolution is at most 10 s)."""

    def __init__(self, step: float = 10.0, *, max_series: int = DEFAULT_MAX_SERIES) -> None:
        if not 0 < step <= 10:
            raise ValueError("the history's interval must be > 0 and <= 10 s")
        if max_series < 1:
            raise ValueError("the history needs room for at least one series")
        self.max_series = max_series
        self.fine = Tier(FINE_POINTS, step)
        self.coarse = Tier(COARSE_POINTS, step * COARSE_EVERY)
        self.refused = 0  # series not recorded at the last sample: no room
        self._samples = 0

    @property
    def step(self) -> float:
        """Seconds between samples."""
        return self.fine.step

    def recorded(self) -> list[SeriesKey]:
        """The series recorded now."""
        return list(self.fine.values)

    def record(self, at: float, values: Mapping[SeriesKey, float]) -> None:
        """One sample of every series at time ``at`` (seconds since the epoch). A recorded
        series not in ``values`` is dropped (its subject is gone); new ones are added, in the
        order given, while there is room (module doc)."""
        for key in [k for k in self.fine.values if k not in values]:
            self.fine.drop(key)
            self.coarse.drop(key)
        refused = 0
        for key in values:
            if key in self.fine.values:
                continue
            if len(self.fine.values) >= self.max_series:
                refused += 1
                continue
            self.fine.add(key)
            self.coarse.add(key)
        self.refused = refused
        self.fine.append(at, values)
        self._samples += 1
        if self._samples % COARSE_EVERY == 0:
            self.coarse.append(at, {k: _mean(v) for k, v in self.fine.last(COARSE_EVERY).items()})

    def read(self, keys: Iterable[SeriesKey], span: str = "hour") -> Reading:
        """The ``hour`` (fine) or ``day`` (coarse) tier of the series ``keys``."""
        tier = self.fine if span == "hour" else self.coarse
        times, series = tier.read(keys)
        return Reading(tier.step, times, series)


def _mean(values: list[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present) if present else _NAN
