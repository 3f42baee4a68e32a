"""Pop (simple consumers and the gRPC clients, RocketMQ 5.x style): receive, ack, nack.

The broker tracks, per (group, topic, queue), what it handed out and until when (pop.py). A
message not acknowledged within its invisible time is delivered again with its attempt count
raised, and moved to the group's DLQ once the attempts are used up. FIFO groups add blocking
per message group: a group's next message waits while an earlier one is in flight
(docs/semantics.md, "Ordered messages").
"""

from __future__ import annotations

import logging
import time

from pocketmq import properties as props
from pocketmq.broker.attempts import ReceiveAttempts
from pocketmq.broker.deadletters import DeadLetters
from pocketmq.broker.filtering import parse_tag_expression
from pocketmq.broker.history import Outcome
from pocketmq.broker.parts import BrokerPart, Shared
from pocketmq.broker.pop_state import Handle, InFlight, PopBatch, PopQueue
from pocketmq.broker.topics import (
    TopicConfig,
)
from pocketmq.errors import (
    InvalidArgumentError,
)
from pocketmq.model.groups import GroupConfig
from pocketmq.model.messages import Delivered
from pocketmq.store import (
    GetStatus,
    StoredMessage,
)

__all__ = ["PopPath"]

log = logging.getLogger("pocketmq.broker")


_SKIPPABLE = (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING)


class PopPath(BrokerPart):
    """Hands out messages with receipt handles and settles them."""

    def __init__(self, shared: Shared, dead_letters: DeadLetters) -> None:
        super().__init__(shared)
        self._dead_letters = dead_letters
        self._attempts = ReceiveAttempts(time.monotonic)

    def pop_now(
        self,
        group: str,
        topic: str,
        *,
        max_count: int = 32,
        invisible: float = 30.0,
        expression: str = "*",
        consumer: str = "",
        queue_hint: int = -1,
        max_bytes: int | None = None,
    ) -> list[Delivered]:
        """A pop answered without waiting (possibly empty). ``max_bytes``: stop taking messages
        once those taken hold this many bytes (see :class:`PopBatch`)."""
        group_config = self._group(group)
        topic_config = self._readable_topic(topic, group)
        if invisible <= 0:
            raise InvalidArgumentError("invisible duration must be positive")
        delivered = self._pop_once(
            group_config,
            topic_config,
            max(1, min(max_count, 1024)),
            invisible,
            parse_tag_expression(expression),
            consumer,
            queue_hint,
            max_bytes,
        )
        self.counters["messages_out"] += len(delivered)
        self.traffic.delivered(group, delivered)
        return delivered

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int = 32,
        invisible: float = 30.0,
        max_wait: float = 0.0,
        expression: str = "*",
        consumer: str = "",
        queue_hint: int = -1,
        max_bytes: int | None = None,
        attempt_id: str = "",
    ) -> list[Delivered]:
        """A pop that long-polls up to ``max_wait`` for something to deliver. A pop retried with
        the ``attempt_id`` of the consumer's last pop gets that pop's messages again."""
        key = (consumer, group, topic)
        again = self._attempts.retry(key, attempt_id)
        if again is not None:
            return again
        delivered = await self._pop(
            group,
            topic,
            max_count=max_count,
            invisible=invisible,
            max_wait=max_wait,
            expression=expression,
            consumer=consumer,
            queue_hint=queue_hint,
            max_bytes=max_bytes,
        )
        self._attempts.record(key, attempt_id, delivered, invisible)
        return delivered

    def sweep_attempts(self) -> None:
        """Forget retried-receive answers whose invisible time has ended."""
        self._attempts.sweep()

    async def _pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int,
        invisible: float,
        max_wait: float,
        expression: str,
        consumer: str,
        queue_hint: int,
        max_bytes: int | None,
    ) -> list[Delivered]:
        deadline = self._clock() + min(max_wait, self.config.max_long_poll)
        while True:
            delivered = self.pop_now(
                group,
                topic,
                max_count=max_count,
                invisible=invisible,
                expression=expression,
                consumer=consumer,
                queue_hint=queue_hint,
                max_bytes=max_bytes,
            )
            remaining = deadline - self._clock()
            if delivered or remaining <= 0:
                return delivered
            next_expiry = self._next_expiry(group, self.topics.require(topic))
            if next_expiry is not None:
                remaining = min(remaining, max(0.001, next_expiry - self._clock()))
            await self.arrivals.wait(topic, remaining)

    def _pop_once(
        self,
        group: GroupConfig,
        topic: TopicConfig,
        max_count: int,
        invisible: float,
        tags: frozenset[str] | None,
        consumer: str,
        queue_hint: int,
        max_bytes: int | None = None,
    ) -> list[Delivered]:
        now = self._clock()
        out = PopBatch(max_bytes)
        key = f"{group.name}@{topic.name}"
        start = queue_hint if 0 <= queue_hint < topic.queues else self._round_robin.get(key, 0)
        self._round_robin[key] = start + 1
        for step in range(topic.queues):
            if len(out) >= max_count or out.full_of_bytes:
                break
            queue_id = (start + step) % topic.queues
            state = self.pop_state.get(group.name, topic.name, queue_id)
            if state is None:
                committed = self.offsets.query(group.name, topic.name, queue_id)
                first = (
                    committed
                    if committed >= 0
                    else self._initial_offset(group, topic.name, queue_id)
                )
                state = self.pop_state.ensure(group.name, topic.name, queue_id, first)
            if group.fifo:
                self._pop_fifo(
                    group,
                    topic.name,
                    queue_id,
                    state,
                    now,
                    invisible,
                    consumer,
                    tags,
                    out,
                    max_count,
                )
            else:
                self._redeliver(
                    group, topic.name, queue_id, state, now, invisible, consumer, out, max_count
                )
                if (
                    len(out) < max_count
                    and not out.full_of_bytes
                    and len(state.inflight) < self.config.max_inflight_per_queue
                ):
                    self._deliver_new(
                        topic.name, queue_id, state, now, invisible, consumer, tags, out, max_count
                    )
            self.offsets.commit(group.name, topic.name, queue_id, state.committed)
        if out:
            self.pop_state.dirty = True
        return out

    def _redeliver(
        self,
        group: GroupConfig,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        out: PopBatch,
        max_count: int,
    ) -> None:
        for offset, entry in state.expired(now):
            if len(out) >= max_count or out.full_of_bytes:
                state.requeue(offset, entry)
                continue
            message = self._message_at(topic, queue_id, offset)
            if message is None:  # removed by retention
                state.finish(offset)
                continue
            self._record_expiry(group.name, message, entry, now)
            if group.retry.max_retries >= 0 and entry.attempt >= group.retry.max_attempts:
                self._dead_letters.dead_letter_offset(
                    group.name, topic, queue_id, offset, state, message, entry
                )
                continue
            self._hand_out(
                out, state, queue_id, offset, message, entry.attempt + 1, now, invisible, consumer
            )

    def _deliver_new(
        self,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        tags: frozenset[str] | None,
        out: PopBatch,
        max_count: int,
    ) -> None:
        got = self.store.get_messages(
            topic, queue_id, state.next_offset, max_count=max_count - len(out), tags=tags
        )
        if got.status is GetStatus.OFFSET_TOO_SMALL:
            state.skip_to(got.next_offset)
            got = self.store.get_messages(
                topic, queue_id, state.next_offset, max_count=max_count - len(out), tags=tags
            )
        for message in got.messages:
            if out.full_of_bytes:  # the rest stays for the next pop
                state.skip_to(message.queue_offset)
                return
            offset = message.queue_offset
            attempt = message.reconsume_times + 1
            self._hand_out(out, state, queue_id, offset, message, attempt, now, invisible, consumer)
            state.next_offset = offset + 1
        if got.status in (
            GetStatus.FOUND,
            GetStatus.NO_MATCHED_MESSAGE,
            GetStatus.MESSAGE_WAS_REMOVING,
        ):
            state.skip_to(got.next_offset)

    def _pop_fifo(
        self,
        group: GroupConfig,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        tags: frozenset[str] | None,
        out: PopBatch,
        max_count: int,
    ) -> None:
        """FIFO pop: per message group, never hand out a message while an earlier one of its
        group is in flight and still invisible (per group instead of per queue, so one failing
        group does not stall the others hashed to the same queue: docs/semantics.md, "Ordered
        messages"). First what is already pending, then new messages."""
        busy = state.busy_groups(now)
        self._fifo_pending(
            group, topic, queue_id, state, now, invisible, consumer, out, max_count, busy
        )
        self._fifo_new(topic, queue_id, state, now, invisible, consumer, tags, out, max_count, busy)

    def _fifo_pending(
        self,
        group: GroupConfig,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        out: PopBatch,
        max_count: int,
        busy: set[str],
    ) -> None:
        """FIFO pop, step 1: what is already pending (expired deliveries and parked messages),
        in offset order, for the message groups not in ``busy``."""
        limit = group.retry.max_attempts if group.retry.max_retries >= 0 else None
        for offset in sorted(set(state.inflight) | set(state.parked)):
            if len(out) >= max_count or out.full_of_bytes:
                return
            entry = state.inflight.get(offset)
            key = entry.message_group if entry is not None else state.parked[offset]
            if key in busy:
                continue
            message = self._message_at(topic, queue_id, offset)
            if message is None:
                state.finish(offset)
                continue
            if entry is not None:  # its invisible time passed: deliver again, attempt + 1
                self._record_expiry(group.name, message, entry, now)
                if limit is not None and entry.attempt >= limit:
                    self._dead_letters.dead_letter_offset(
                        group.name, topic, queue_id, offset, state, message, entry
                    )
                    continue
                attempt = entry.attempt + 1
            else:
                del state.parked[offset]
                attempt = message.reconsume_times + 1
            self._hand_out(
                out, state, queue_id, offset, message, attempt, now, invisible, consumer, key
            )

    def _fifo_new(
        self,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        tags: frozenset[str] | None,
        out: PopBatch,
        max_count: int,
        busy: set[str],
    ) -> None:
        """FIFO pop, step 2: new messages; hand out those of idle message groups, park those of
        busy ones (and those past the batch's room) behind them."""
        while (
            len(out) < max_count
            and not out.full_of_bytes
            and len(state.parked) < self.config.max_inflight_per_queue
        ):
            got = self.store.get_messages(
                topic, queue_id, state.next_offset, max_count=max_count, tags=tags
            )
            if got.status is GetStatus.OFFSET_TOO_SMALL:
                state.skip_to(got.next_offset)
                continue
            if not got.messages:
                if got.status in _SKIPPABLE:
                    state.skip_to(got.next_offset)
                return
            for message in got.messages:
                offset = message.queue_offset
                key = message.properties.get(props.MESSAGE_GROUP) or f"\0{offset}"
                if key in busy or len(out) >= max_count or out.full_of_bytes:
                    state.parked[offset] = key
                    busy.add(key)  # keep the group's later messages behind this one
                else:
                    attempt = message.reconsume_times + 1
                    self._hand_out(
                        out,
                        state,
                        queue_id,
                        offset,
                        message,
                        attempt,
                        now,
                        invisible,
                        consumer,
                        key,
                    )
                state.next_offset = offset + 1
            state.skip_to(got.next_offset)

    def _hand_out(
        self,
        out: PopBatch,
        state: PopQueue,
        queue_id: int,
        offset: int,
        message: StoredMessage,
        attempt: int,
        now: float,
        invisible: float,
        consumer: str,
        message_group: str = "",
    ) -> None:
        """Put ``message`` in flight until ``now + invisible`` and add it to the batch with the
        receipt handle that names it (every pop path hands out through here)."""
        token = state.hand_out(
            offset, attempt, now + invisible, consumer, now, message_group, message.message_id
        )
        handle = Handle(queue_id, offset, token).encode()
        out.append(self._deliver(message, attempt=attempt, handle=handle))

    def _next_expiry(self, group: str, topic: TopicConfig) -> float | None:
        times = []
        for queue_id in range(topic.queues):
            state = self.pop_state.get(group, topic.name, queue_id)
            if state is not None:
                visible_at = state.next_visible_at()
                if visible_at is not None:
                    times.append(visible_at)
        return min(times) if times else None

    def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Acknowledge a popped message: record the success, finish it, move the committed offset,
        and wake pops waiting on a FIFO group it was holding back."""
        handle = Handle.parse(receipt_handle)
        state, entry = self.pop_state.lookup(group, topic, handle)
        self._record_entry(group, topic, entry, Outcome.SUCCESS)
        state.finish(handle.offset)
        self.offsets.commit(group, topic, handle.queue_id, state.committed)
        self.pop_state.dirty = True
        self.counters["acks"] += 1
        if state.parked:
            self.arrivals.notify(topic)  # FIFO: the group's next message may be handed out

    def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible: float, *, error: str = ""
    ) -> str:
        """Hide the message again for ``invisible`` seconds; returns the new receipt handle.

        This is how a pop consumer says "failed, retry later": the current attempt is recorded
        as ``RECONSUME_LATER`` and the next delivery counts as a new attempt.
        """
        if invisible < 0:
            raise InvalidArgumentError("invisible duration must not be negative")
        handle = Handle.parse(receipt_handle)
        state, entry = self.pop_state.lookup(group, topic, handle)
        self._record_entry(group, topic, entry, Outcome.RECONSUME_LATER, error)
        was_visible_at = entry.visible_at
        visible_at = self._clock() + invisible
        token = state.rehide(handle.offset, visible_at)
        group_config = self.groups.get(group)
        if group_config is not None and group_config.fifo and entry.message_group:
            state.rehide_group(entry.message_group, visible_at)  # the run comes back together
            token = state.inflight[handle.offset].token
        self.pop_state.dirty = True
        if entry.visible_at < was_visible_at:
            # sooner than before: long polls sleeping until the old time must look again
            self.arrivals.notify(topic)
        return Handle(handle.queue_id, handle.offset, token).encode()

    def revive(self, now: float) -> None:
        """Move messages that used up their attempts to the DLQ without waiting for a pop."""
        for (group_name, topic, queue_id), state in self.pop_state.items():
            group = self.groups.get(group_name)
            if group is None or group.retry.max_retries < 0:
                continue
            for offset, entry in state.expired(now):
                if entry.attempt >= group.retry.max_attempts:
                    message = self._message_at(topic, queue_id, offset)
                    if message is not None:
                        self._record_expiry(group_name, message, entry, now)
                    self._dead_letters.dead_letter_offset(
                        group_name, topic, queue_id, offset, state, message, entry
                    )
                else:
                    state.requeue(offset, entry)

    def _record_expiry(
        self, group: str, message: StoredMessage, entry: InFlight, now: float
    ) -> None:
        self._record_entry(
            group,
            message.topic,
            entry,
            Outcome.INVISIBLE_EXPIRED,
            "not acknowledged within the invisible time",
            now,
        )

    def _record_entry(
        self,
        group: str,
        topic: str,
        entry: InFlight,
        outcome: Outcome,
        error: str = "",
        finished_at: float | None = None,
    ) -> None:
        """One pop delivery attempt ended: record it in the attempt history."""
        self.history.record(
            message_id=entry.message_id,
            group=group,
            topic=topic,
            attempt=entry.attempt,
            outcome=outcome,
            consumer=entry.consumer,
            error=error,
            delivered_at=entry.delivered_at,
            finished_at=finished_at,
            message_group=entry.message_group,
        )
