"""Queue locks for orderly (4.x-style) push consumers.

An orderly consumer may only consume a queue it holds the lock of, so during a rebalance the old
owner finishes (and commits) before the new owner starts: no two consumers ever work on one queue
at once. Locks expire after ``expiry`` seconds without renewal (60 s, RocketMQ's default), so a
crashed consumer's queues move on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["QueueLocks"]

LockKey = tuple[str, str, int]  # group, topic, queue id


class QueueLocks:
    """Who holds each (group, topic, queue) for orderly consumption, and until when (module doc)."""

    def __init__(self, expiry: float, clock: Callable[[], float]) -> None:
        self._expiry = expiry
        self._clock = clock
        self._owners: dict[LockKey, tuple[str, float]] = {}

    def lock(
        self, group: str, client_id: str, queues: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        """Take or renew the locks; returns the queues now held by ``client_id``."""
        now = self._clock()
        granted: list[tuple[str, int]] = []
        for topic, queue_id in queues:
            key = (group, topic, queue_id)
            owner = self._owners.get(key)
            if owner is not None and owner[1] > now + self._expiry:
                # the wall clock stepped back: the lock stays its holder's, but expires at most
                # one expiry from now (docs/operations.md, "When the wall clock steps")
                owner = self._owners[key] = (owner[0], now + self._expiry)
            if owner is None or owner[0] == client_id or owner[1] <= now:
                self._owners[key] = (client_id, now + self._expiry)
                granted.append((topic, queue_id))
        return granted

    def unlock(self, group: str, client_id: str, queues: Sequence[tuple[str, int]]) -> None:
        """Give queues back (a rebalance moved them) so the new owner need not wait for the expiry;
        only the holder can."""
        for topic, queue_id in queues:
            key = (group, topic, queue_id)
            owner = self._owners.get(key)
            if owner is not None and owner[0] == client_id:
                del self._owners[key]

    def release_client(self, client_id: str, groups: Sequence[str] | None = None) -> None:
        """Drop the locks of a client that left (in ``groups``, or all of them), so its queues
        move at once; leaving one group keeps the locks it holds in the others."""
        for key in [
            k
            for k, (owner, _) in self._owners.items()
            if owner == client_id and (groups is None or k[0] in groups)
        ]:
            del self._owners[key]
