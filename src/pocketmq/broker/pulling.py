"""Pull (push consumers, RocketMQ 4.x style) and the committed offsets it works with.

The consumer names the queue and the offset; the broker reads from the consume queue and, when
nothing is there yet, parks the request until a message arrives or the long poll ends.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pocketmq.broker.filtering import parse_tag_expression
from pocketmq.broker.parts import BrokerPart
from pocketmq.errors import (
    InvalidArgumentError,
)
from pocketmq.model.messages import Delivered, PullOutcome, PullStatus
from pocketmq.store import (
    GetResult,
    GetStatus,
)

__all__ = ["PullPath"]

log = logging.getLogger("pocketmq.broker")

# an enum member read costs a dict lookup and a descriptor call each time on CPython 3.11: read
# once (docs/benchmarks.md, "Enum member reads and the front's forwarding, swept")
_FOUND = GetStatus.FOUND


class PullPath(BrokerPart):
    """Answers pulls and keeps clustering consumers' committed offsets."""

    def pull_now(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        expression: str = "*",
    ) -> PullOutcome | None:
        """A pull answered without waiting, or None when it would wait for new messages."""
        tags = self._check_pull(group, topic, queue_id, expression)
        if self._shared.resets:
            moved = self._follow_reset(group, topic, queue_id, offset)
            if moved is not None:
                return moved
        got = self.store.get_messages(
            topic, queue_id, offset, max_count=max(1, min(max_count, 1024)), tags=tags
        )
        if got.status is _FOUND:
            return self._found(group, topic, got)
        return None

    def _check_pull(
        self, group: str, topic: str, queue_id: int, expression: str
    ) -> frozenset[str] | None:
        """The group exists and may read the topic, the queue exists; the parsed tag filter."""
        self._group(group)
        config = self._readable_topic(topic, group)
        if not 0 <= queue_id < config.queues:
            raise InvalidArgumentError(f"topic {topic!r} has no queue {queue_id}")
        return parse_tag_expression(expression)

    def _found(self, group: str, topic: str, got: GetResult) -> PullOutcome:
        """Messages were read: deliver them and count them. What :meth:`_deliver` does, written
        out for a whole pull (positional fields, the broker's name looked up once) and counted
        once per pull: every consumed message passes here (docs/benchmarks.md, "Broker consume
        path (issue 32, third slice)")."""
        name = self.config.broker_name
        delivered = [
            Delivered(
                m.topic,
                m.queue_id,
                m.queue_offset,
                m.body,
                m.properties,
                m.born_timestamp,
                m.store_timestamp,
                m.physical_offset,
                m.reconsume_times + 1,
                "",
                m.born_host,
                name,
            )
            for m in got.messages
        ]
        self.counters["messages_out"] += len(delivered)
        # one queue's messages: all of ``topic``
        self.traffic.delivered_from(
            topic, group, len(delivered), sum([len(m.body) for m in delivered])
        )
        return PullOutcome(
            PullStatus.FOUND, got.next_offset, got.min_offset, got.max_offset, delivered
        )

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        expression: str = "*",
        max_wait: float = 0.0,
    ) -> PullOutcome:
        """A pull that long-polls up to ``max_wait`` for its queue when nothing is there yet (4.x
        push consumers)."""
        tags = self._check_pull(group, topic, queue_id, expression)
        max_count = max(1, min(max_count, 1024))
        deadline = self._clock() + min(max_wait, self.config.max_long_poll)
        while True:
            if self._shared.resets:
                moved = self._follow_reset(group, topic, queue_id, offset)
                if moved is not None:
                    return moved
            got = self.store.get_messages(topic, queue_id, offset, max_count=max_count, tags=tags)
            status = got.status
            if status is _FOUND:
                return self._found(group, topic, got)
            waiting = status is GetStatus.OFFSET_OVERFLOW_ONE or (
                status is GetStatus.NO_MESSAGE_IN_QUEUE and offset == 0
            )
            if waiting:
                remaining = deadline - self._clock()
                if remaining > 0 and await self.arrivals.wait((topic, queue_id), remaining):
                    continue
                return PullOutcome(
                    PullStatus.NO_NEW_MESSAGE, offset, got.min_offset, got.max_offset
                )
            if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                return PullOutcome(
                    PullStatus.NO_MATCHED_MESSAGE, got.next_offset, got.min_offset, got.max_offset
                )
            return PullOutcome(
                PullStatus.OFFSET_ILLEGAL, got.next_offset, got.min_offset, got.max_offset
            )

    def _follow_reset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> PullOutcome | None:
        """An operator reset this queue (broker/resets.py): a pull at the new offset shows the
        consumer follows it (the reset is done); a pull elsewhere is told where to go."""
        key = (group, topic, queue_id)
        target = self._shared.resets.get(key)
        if target is None:
            return None
        if offset == target:
            del self._shared.resets[key]
            return None
        return PullOutcome(
            PullStatus.OFFSET_MOVED,
            target,
            self.store.min_offset(topic, queue_id),
            self.store.max_offset(topic, queue_id),
        )

    def commit_offsets(self, group: str, entries: Sequence[tuple[str, int, int]]) -> None:
        """Commit a consumer's offsets after checking every entry (so one bad name cannot corrupt
        ``offsets.json``); an offset past the queue's end is cut to the end."""
        self._group(group)
        self.offsets.check(entries)  # names end up in offsets.json keys: refuse before storing
        resets = self._shared.resets
        for topic, queue_id, offset in entries:
            if resets and (group, topic, queue_id) in resets:
                continue  # sent before the consumer followed an operator's reset: stale
            # nobody consumed past the queue's end: a larger offset is a client's mistake
            newest = self.store.max_offset(topic, queue_id)
            self.offsets.commit(group, topic, queue_id, min(offset, newest))

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or where a group without one starts (its consume-from)."""
        group_config = self._group(group)
        committed = self.offsets.query(group, topic, queue_id)
        if committed >= 0:
            return committed
        return self._initial_offset(group_config, topic, queue_id)
