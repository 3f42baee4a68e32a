"""Which queue a send goes to.

Plain messages go round-robin over a topic's writable queues, from a random start so that many
producers do not all begin on queue 0. A broker that failed a send is set aside for 30 s
(RocketMQ's "send latency fault tolerance", simplified to a fixed isolation time) and a retry
avoids the brokers already tried; when every broker is set aside, any queue is better than none.

A FIFO message (one with a message group) always goes to its group's queue
(:func:`pocketmq.routing.queue_for_group`, the same hash the gRPC adapter uses): moving it to
another queue would break the group's order.
"""

from __future__ import annotations

import random
import time
from typing import Final

from pocketmq.client.routes import QueueRef, Route
from pocketmq.errors import NoMasterError, NoPermissionError
from pocketmq.routing import queue_for_group

__all__ = ["ISOLATION_SECONDS", "QueueSelector"]

ISOLATION_SECONDS: Final = 30.0


class QueueSelector:
    """Picks queues for sends and remembers which brokers failed recently."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._turn: dict[str, int] = {}
        self._isolated: dict[str, float] = {}

    def pick(self, route: Route, group: str | None, avoid: set[str]) -> QueueRef:
        """The queue for the next send to ``route``'s topic, avoiding the brokers in ``avoid``
        (tried already by this send) and the isolated ones while others are left."""
        queues = route.writable
        if not queues:
            if route.masterless:
                groups = ", ".join(sorted(route.masterless))
                raise NoMasterError(
                    f"topic {route.topic!r} has no writable queue now: its broker group(s) "
                    f"{groups} have no master (a failover is under way: docs/replication.md "
                    "§9); retry"
                )
            raise NoPermissionError(f"topic {route.topic!r} is read-only: it takes no sends")
        if group:
            return queues[queue_for_group(group, len(queues))]
        turn = self._turn.get(route.topic)
        if turn is None:
            turn = self._rng.randrange(1 << 16)
        self._turn[route.topic] = turn + 1
        if not avoid and not self._isolated:
            return queues[turn % len(queues)]
        now = time.monotonic()
        isolated = {b for b, until in self._isolated.items() if until > now}
        if not isolated:
            self._isolated.clear()
        candidates = [
            q for q in queues if q.broker_name not in avoid and q.broker_name not in isolated
        ]
        if not candidates:
            candidates = [q for q in queues if q.broker_name not in avoid] or list(queues)
        return candidates[turn % len(candidates)]

    def isolate(self, broker_name: str) -> None:
        """Set ``broker_name`` aside for the next :data:`ISOLATION_SECONDS`: it just failed."""
        self._isolated[broker_name] = time.monotonic() + ISOLATION_SECONDS
