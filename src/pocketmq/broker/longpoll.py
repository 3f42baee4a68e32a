"""Long polling: consumers wait on a topic, and the first arrival wakes them all.

One event per topic, replaced after every wake-up: a waiter that arrives later waits for the next
arrival, and nobody polls in a loop.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["ArrivalNotifier"]


class ArrivalNotifier:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    async def wait(self, topic: str, max_wait: float) -> bool:
        """Wait until something arrives on ``topic`` (True) or ``max_wait`` passes (False)."""
        if max_wait <= 0:
            return False
        event = self._events.get(topic)
        if event is None:
            event = self._events[topic] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max_wait)
            return True
        return False

    def notify(self, topic: str) -> None:
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
