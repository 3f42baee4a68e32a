"""Flow control: fail fast with TOO_MANY_REQUESTS (530) instead of queueing without bound.

The broker sheds load when the store is under pressure or requests queue up; clients back off
exponentially (docs/semantics.md, "Flow control" and "Producer"). A send is refused when

- the event loop is running behind by more than ``max_queue_wait`` (200 ms): requests are waiting
  that long before anyone looks at them (measured by a ticker that notices its own lateness);
- more than ``max_pending_flushes`` sends are waiting for a sync flush;
- the store reports an append slower than its busy timeout (1 s);
- a queue's backlog (its newest offset minus the slowest committed offset of the groups consuming
  it) exceeds ``max_queue_backlog``, when such a cap is configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

__all__ = ["FlowControl"]


class FlowControl:
    """The load signals a send is refused on (module doc), measured on the event loop so the answer
    is immediate: TOO_MANY_REQUESTS, and the client backs off."""

    def __init__(
        self,
        *,
        max_queue_wait: float,
        max_pending_flushes: int,
        max_queue_backlog: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_queue_wait = max_queue_wait
        self.max_pending_flushes = max_pending_flushes
        self.max_queue_backlog = max_queue_backlog
        self._clock = clock
        self.lag = 0.0
        self.pending_flushes = 0
        self.rejected = 0
        self._tick = 0.05
        self._ticker: asyncio.Task[None] | None = None

    def start(self, tick: float = 0.05) -> None:
        """Start the ticker that measures event-loop lag every ``tick`` seconds."""
        self._tick = tick
        self._ticker = asyncio.create_task(self._measure_lag(tick))

    async def restart(self) -> None:
        """Forget the lag measured so far and measure afresh: called once the server is up, so
        the stalls of starting it (imports, listeners, certificates: a few hundred ms on a small
        machine) do not refuse the first sends as if requests were queueing."""
        await self.stop()
        self.lag = 0.0
        self.start(self._tick)

    async def stop(self) -> None:
        """Stop the lag ticker (shutdown)."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker

    async def _measure_lag(self, tick: float) -> None:
        while True:
            expected = self._clock() + tick
            await asyncio.sleep(tick)
            late = self._clock() - expected
            # decay slowly so one stall is remembered for a few ticks
            self.lag = max(late, self.lag * 0.5)

    def overload_reason(self, store_busy: bool) -> str | None:
        """Why a send must be refused now, or None."""
        if store_busy:
            return "the store is busy (an append is taking longer than 1 s)"
        if self.lag > self.max_queue_wait:
            return f"requests are waiting {self.lag * 1000:.0f} ms to be served"
        if self.pending_flushes > self.max_pending_flushes:
            return f"{self.pending_flushes} sends are waiting for a disk flush"
        return None

    def backlog_exceeded(self, backlog: int) -> bool:
        """Whether one more message would take the queue past its cap."""
        return self.max_queue_backlog is not None and backlog >= self.max_queue_backlog
