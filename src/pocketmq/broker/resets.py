"""Operator offset resets: move a group's position on a topic to a time, the oldest or the newest
message, while its consumers stay online (docs/operations.md, "Resetting a group's offsets").

A reset writes the new committed offsets and pop positions at once. Pop consumers (the SDK's
simple consumer, every gRPC client) read their position from the broker, so they continue from it
on their next receive. Push consumers keep their position in memory and commit it every few
seconds, so the broker also keeps a **pending reset** for each queue of the group that has
consumers online: until that queue is next pulled at the new offset, the group's commits for it
are ignored (a commit sent before the consumer heard of the reset would undo it) and a pull at any
other offset is answered ``OFFSET_MOVED`` with the new offset, which the SDK follows. Waiting long
polls are woken so the move reaches a consumer at once rather than when its poll ends.

Pending resets live in memory only: a broker restarted between a reset and the consumers' next
pull forgets them, and a push consumer may then commit its old position once more (the operator
resets again). Messages a push consumer had already fetched when the reset came are still
processed (at-least-once: a consumer never loses what it holds); pop messages in flight are
forgotten: their acks are refused as unknown and they are not redelivered unless the new offset
is before them.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from pocketmq.broker.parts import BrokerPart
from pocketmq.broker.pop_state import PopQueue
from pocketmq.broker.topics import DLQ_PREFIX
from pocketmq.errors import InvalidArgumentError, NoPermissionError, TopicNotFoundError
from pocketmq.store import GetStatus

__all__ = ["OffsetResets", "QueueReset", "ResetTarget"]

log = logging.getLogger("pocketmq.broker")


class ResetTarget(enum.Enum):
    """Where a reset moves the group: the first message stored at or after a time, the oldest
    message kept, or past the newest (skip everything stored so far)."""

    TIME = "time"
    EARLIEST = "earliest"
    LATEST = "latest"


@dataclass(frozen=True, slots=True)
class QueueReset:
    """What a reset did to one queue: the group's committed offset before (-1: none) and after."""

    queue_id: int
    before: int
    after: int


class OffsetResets(BrokerPart):
    """Resets and the pending moves push consumers still have to follow (module doc)."""

    def reset(
        self, group: str, topic: str, target: ResetTarget, at_ms: int = 0
    ) -> list[QueueReset]:
        """Move ``group`` on ``topic`` to ``target`` (``at_ms``: milliseconds since the epoch, for
        :attr:`ResetTarget.TIME`); one line per queue."""
        self._group(group)
        config = self.topics.get(topic)
        if config is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        if topic.startswith(DLQ_PREFIX):
            raise NoPermissionError(
                f"{topic!r} is a dead-letter topic: nobody consumes it, so it has no offsets"
            )
        if target is ResetTarget.TIME and at_ms <= 0:
            raise InvalidArgumentError("a reset to a time needs a positive time in milliseconds")
        online = bool(self.consumers.client_ids(group))
        lines = []
        for queue_id in range(config.queues):
            offset = self._offset_for(topic, queue_id, target, at_ms)
            key = (group, topic, queue_id)
            lines.append(QueueReset(queue_id, self.offsets.query(group, topic, queue_id), offset))
            self.offsets.force(group, topic, queue_id, offset)
            if self.pop_state.get(group, topic, queue_id) is not None:
                self.pop_state.replace(key, PopQueue(next_offset=offset, committed=offset))
            if online:
                self._shared.resets[key] = offset
            else:
                self._shared.resets.pop(key, None)
            self.arrivals.notify((topic, queue_id))  # long polls answer with the move now
        self.offsets.persist(force=True)
        log.warning(
            "offsets of group %r on %r reset to %s%s: %s",
            group,
            topic,
            target.value,
            f" {at_ms}" if target is ResetTarget.TIME else "",
            ", ".join(f"{r.queue_id}:{r.before}->{r.after}" for r in lines),
        )
        return lines

    def _offset_for(self, topic: str, queue_id: int, target: ResetTarget, at_ms: int) -> int:
        low = self.store.min_offset(topic, queue_id)
        high = self.store.max_offset(topic, queue_id)
        if target is ResetTarget.EARLIEST:
            return low
        if target is ResetTarget.LATEST:
            return high
        # the first offset whose message was stored at or after ``at_ms``: store times only grow
        # along a queue, so a binary search reads log2(n) messages
        while low < high:
            middle = (low + high) // 2
            stored = self._store_time(topic, queue_id, middle)
            if stored is None or stored >= at_ms:
                high = middle
            else:
                low = middle + 1
        return low

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int | None:
        got = self.store.get_messages(topic, queue_id, offset, max_count=1)
        if got.status is not GetStatus.FOUND or not got.messages:
            return None  # removed or unreadable: treat as "not before the time"
        return got.messages[0].store_timestamp
