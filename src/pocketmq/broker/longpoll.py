"""Long polling: consumers wait, and the next arrival wakes exactly the ones it concerns.

A pull waits on its queue (``(topic, queue_id)``): a message for another queue of the topic does
not wake it. A pop waits on its topic (any queue will do). A waiter is a bare future with one
timer, not a task: at thousands of arrivals per second the wake-up is on the hot path.

A server that writes the woken handlers' answers sets :attr:`ArrivalNotifier.on_wake`: called
after each notify that woke someone, it may queue their answers' write behind the wake-ups, so
they leave in the arrival's loop turn (server/serving.py, ``WriteBehind``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

__all__ = ["ArrivalNotifier"]


class ArrivalNotifier:
    """Long-poll waiters per key (module doc): a queue for pulls, a topic for pops."""

    def __init__(self) -> None:
        # waiters by key; always this one dict (emptied, never replaced), so a caller with many
        # keys to notify may first check that anyone waits at all (broker/parts.py, wake_readers)
        self.waiters: dict[Hashable, list[asyncio.Future[bool]]] = {}
        self.on_wake: Callable[[], None] | None = None
        """Called after a notify woke waiters, their wake-ups queued (module doc)."""

    async def wait(self, key: Hashable, max_wait: float) -> bool:
        """Wait until something arrives for ``key`` (True) or ``max_wait`` passes (False)."""
        if max_wait <= 0:
            return False
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        waiters = self.waiters.setdefault(key, [])
        waiters.append(future)
        timer = loop.call_later(max_wait, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            current = self.waiters.get(key)
            if current is not None and future in current:
                current.remove(future)
                if not current:
                    del self.waiters[key]

    def notify(self, key: Hashable) -> None:
        """Wake everyone waiting on ``key``: a message arrived (or a pop state changed) that they
        may now get."""
        waiters = self.waiters.pop(key, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(True)
            if self.on_wake is not None:
                self.on_wake()

    def notify_all(self) -> None:
        """Wake every waiter (shutdown), so no long poll outlives the broker."""
        waiters = list(self.waiters.values())
        self.waiters.clear()
        for futures in waiters:
            for future in futures:
                if not future.done():
                    future.set_result(True)


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
