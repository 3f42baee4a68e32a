"""A process queue: what a push consumer holds of one broker queue it owns.

Pulled messages wait here until they are finished: consumed, handed back to the broker for a
retry, or dropped (broadcasting). The committed offset is always the smallest offset still here,
so a message that is not finished is never skipped, however the others are ordered — the rule
that makes a crash re-deliver rather than lose (docs/semantics.md, "Delivery guarantees").
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from pocketmq.client._views import to_view
from pocketmq.client.consumer.config import QueueKey
from pocketmq.client.message import MessageView
from pocketmq.protocol import structs as w

__all__ = ["ProcessQueue"]


@dataclass(slots=True)
class ProcessQueue:
    """One owned queue: its messages in hand, its pull position and its orderly lanes.

    ``local_attempts`` counts re-consumes done here (a message that could not be handed back,
    an orderly retry), which the broker's delivery attempt does not include. ``held_bytes`` is
    the sum of the bodies held (properties not counted, as RocketMQ's ``msgSize``), which the
    pull loop bounds by ``max_cached_bytes_per_queue`` (docs/semantics.md, "A push consumer
    stops pulling a queue").
    """

    key: QueueKey
    address: str
    expression: str
    next_offset: int = -1
    messages: dict[int, w.Delivered] = field(default_factory=dict)
    dropped: bool = False
    pull_task: asyncio.Task[None] | None = None
    space: asyncio.Event = field(default_factory=asyncio.Event)
    local_attempts: dict[int, int] = field(default_factory=dict)
    lanes: dict[str, collections.deque[w.Delivered]] = field(default_factory=dict)
    lane_tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    held_bytes: int = 0
    # messages finished since the offset store last took this queue's commit offset: the
    # store takes it when it persists (OffsetStore.mark), not once per finished message
    unmarked: bool = False
    # The offsets held, in the rising order they were pulled, finished ones dropped from the
    # front lazily: the commit offset is then found without scanning what is held (up to
    # ``max_cached_per_queue`` messages, after every finished message). None while the queue
    # holds offsets out of order (an operator moved it back): then they are scanned.
    _order: collections.deque[int] | None = field(
        default_factory=collections.deque, init=False, repr=False
    )

    def add(self, messages: Sequence[w.Delivered]) -> list[w.Delivered]:
        """Hold the pulled ``messages`` not held already; returns those (in pull order)."""
        held = self.messages
        fresh: list[w.Delivered] = []
        order = self._order
        size = self.held_bytes
        for message in messages:
            offset = message.queue_offset
            if offset in held:  # held already, or twice in one answer: held and counted once
                continue
            fresh.append(message)
            size += len(message.body)
            if order is not None:
                if order and offset < order[-1]:
                    self._order = order = None
                else:
                    order.append(offset)
            held[offset] = message
        self.held_bytes = size
        if order is not None and len(order) > 2 * len(held) + 64:
            # finished offsets behind an unfinished first one: keep only what is held
            self._order = collections.deque(held)
        return fresh

    def batches(
        self, messages: list[w.Delivered], size: int
    ) -> list[tuple[ProcessQueue, list[w.Delivered]]]:
        """``messages`` as the work queue's items, ``size`` messages each: built here, where
        the build compiles it, and not by a generator in the (pure) pull loop, which cost ~3 %
        of a default consumer's CPU (docs/benchmarks.md, "The push consumer's client CPU per
        message")."""
        if size == 1:  # the default: a listener call per message
            return [(self, [message]) for message in messages]
        return [(self, messages[start : start + size]) for start in range(0, len(messages), size)]

    def commit_offset(self) -> int:
        """The offset that may be committed: the first unfinished message, else the next one
        to pull (-1 before the first pull)."""
        held = self.messages
        if not held:
            self._order = collections.deque()
            return self.next_offset
        order = self._order
        if order is None:
            return min(held)
        while order[0] not in held:
            order.popleft()
        return order[0]

    def span(self) -> int:
        """How many offsets separate the first unfinished message from the next one to pull
        (0 when nothing is held): what a restart would consume again at most."""
        if not self.messages:
            return 0
        return max(0, self.next_offset - self.commit_offset())

    def remove(self, offsets: Sequence[int]) -> None:
        """Forget finished messages, waking a pull loop that waits for room."""
        held, attempts = self.messages, self.local_attempts
        size = self.held_bytes
        for offset in offsets:
            message = held.pop(offset, None)
            if message is not None:  # not held (finished twice, never held): nothing to take
                size -= len(message.body)
            if attempts:  # usually empty: no call (pays for the count, benchmarks.md)
                attempts.pop(offset, None)
        self.held_bytes = size
        self.unmarked = True
        self.space.set()

    def view(self, message: w.Delivered) -> MessageView:
        """``message`` as the listener sees it, its delivery attempt counting local retries."""
        view = to_view(message)
        extra = self.local_attempts.get(message.queue_offset, 0)
        if extra:
            view = msgspec.structs.replace(view, delivery_attempt=view.delivery_attempt + extra)
        return view
