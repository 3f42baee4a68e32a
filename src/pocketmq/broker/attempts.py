"""Receives retried with the same attempt id get the same messages (pop's idempotent retry).

A consumer whose receive failed (a lost response, a decoding error) retries it with the same
attempt id (the official push consumers do). Popping again would leave the first batch invisible
until its invisible time ends (and, for a FIFO group, hold the group back that long); instead the
retry gets the same messages and receipt handles again. Only the latest attempt per consumer,
group and topic is kept, until its invisible time ends: memory stays bounded by consumers ×
topics × a batch.
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.model.messages import Delivered

__all__ = ["ReceiveAttempts"]


class ReceiveAttempts:
    """The last receive of each (consumer, group, topic), by the consumer's attempt id."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._last: dict[tuple[str, str, str], tuple[str, float, list[Delivered]]] = {}

    def retry(self, key: tuple[str, str, str], attempt: str) -> list[Delivered] | None:
        """The messages of the consumer's last receive when ``attempt`` repeats its attempt id and
        their invisible time has not ended; None means pop anew."""
        if not attempt:
            return None
        last = self._last.get(key)
        if last is None or last[0] != attempt or last[1] <= self._clock():
            return None
        return last[2]

    def record(
        self, key: tuple[str, str, str], attempt: str, delivered: list[Delivered], invisible: float
    ) -> None:
        """Remember a receive's messages under its attempt id until they become visible again (an
        empty receive forgets the key: there is nothing to answer again)."""
        if not attempt or not delivered:
            self._last.pop(key, None)
            return
        self._last[key] = (attempt, self._clock() + invisible, delivered)

    def sweep(self) -> None:
        """Drop attempts whose invisible time ended (housekeeping), so memory stays bounded."""
        now = self._clock()
        for key, (_, expires, _) in list(self._last.items()):
            if expires <= now:
                del self._last[key]
