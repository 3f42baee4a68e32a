"""When was a slave last caught up? The master's log end over time, for the in-sync time bound.

A slave is in sync only while it holds what the master held a short while ago
(``ha_max_lag_time``, docs/replication.md §3): as RocketMQ's controller drops a slave that has
not caught up for ``haMaxTimeSlaveNotCatchup``, a slave that acknowledges nothing, or lags in
time rather than in bytes, leaves the in-sync set even when its byte gap is small.

The master notes its log end as the log grows (one sample per few milliseconds at most). A slave
that acknowledged position *a* was caught up at the last moment the master's end was at most *a*:
now when *a* is the end, else the time of the first sample beyond *a*. Samples are coalesced
towards the earlier time, and what lies before the oldest sample counts as long ago, so the
answer is never later than the truth: a slave is never taken for more caught up than it is.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable

__all__ = ["CatchUpClock"]

_COALESCE = 0.005
"""Appends closer together than this share one sample (its earlier time)."""


class CatchUpClock:
    """The master's log end over the last ``window`` seconds (module doc)."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._ends: list[int] = []  # non-decreasing: from _times[i] on, the end was _ends[i]
        self._times: list[float] = []

    def reset(self, end: int) -> None:
        """Start afresh at ``end`` (a master with no slave keeps no history; one that gets a
        slave knows only that its end is ``end`` from now on)."""
        self._ends = [end]
        self._times = [self._clock()]

    def clear(self) -> None:
        """Forget the history (the last slave left)."""
        self._ends.clear()
        self._times.clear()

    def grew(self, end: int) -> None:
        """The log now ends at ``end``."""
        ends = self._ends
        if not ends:
            return  # no slave to measure
        now = self._clock()
        if end <= ends[-1]:
            return
        if now - self._times[-1] < _COALESCE:
            ends[-1] = end  # claims the end was reached earlier: slaves look less caught up
            return
        ends.append(end)
        self._times.append(now)
        if len(ends) > 64 and now - self._times[32] > self.window + 1.0:
            self._trim(now)

    def _trim(self, now: float) -> None:
        cutoff = now - self.window - 1.0
        # keep the last sample before the cutoff: it says what the end was from then on
        keep = max(0, bisect.bisect_left(self._times, cutoff) - 1)
        del self._ends[:keep]
        del self._times[:keep]

    def caught_up_at(self, acked: int, end: int) -> float:
        """The last time the master's end was at most ``acked`` (``end`` is the end now); -inf
        when that was before the history began."""
        if acked >= end:
            return self._clock()
        ends = self._ends
        first_beyond = bisect.bisect_right(ends, acked)
        if first_beyond == 0:
            return -math.inf
        if first_beyond == len(ends):
            # the end moved past the last sample unnoted: caught up at that sample at least
            return self._times[-1]
        return self._times[first_beyond]
