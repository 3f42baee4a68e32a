"""PushConsumer: the broker's queues are shared by a group's live consumers, and a listener is
called with each batch of messages (docs/semantics.md, "Consumer retry, delays and dead
letters").

**Clustering** (default): the queues of each subscribed topic — and of the group's retry topic —
are divided among the group's live consumers (:mod:`.rebalance`), and divided again whenever one
joins or leaves. Each owned queue has a pull loop (:mod:`.pull`) feeding a process queue
(:mod:`.process_queue`); workers call the listener (:mod:`.concurrent`). A message leaves the
process queue when it succeeded or was handed back to the broker for a retry (:mod:`.retry`),
and the committed offset is always the smallest offset still in the process queue: a message
that is not finished is never skipped. Offsets are committed to the broker every 5 s, on
rebalance and on close (:mod:`.offsets`).

**Failures** (``RECONSUME_LATER``, an exception, ``None``, or running past ``consume_timeout``):
the failed messages (after ``ConsumeContext.ack_index``) are sent back to the broker, which stores
them in ``%RETRY%<group>`` after a growing delay or in ``%DLQ%<group>`` once retries are used up.
If the broker cannot take them back, they are re-sent to the retry topic like any message; if
that fails too they stay here and are consumed again after 5 s.

**Broadcasting**: every consumer gets every queue; offsets live in a local file; failures are
logged and dropped (no retry), as in RocketMQ.

**Orderly** (``orderly=True``, 4.x style): queues under broker locks, one lane per message
group (:mod:`.orderly`).

This module is the front: it checks the arguments, wires the parts together, and runs their
loops from ``start`` to ``aclose``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

from pocketmq.client.base import ClientBase, resolve_config
from pocketmq.client.config import ClientConfig
from pocketmq.client.connection import ClientConnection
from pocketmq.client.consumer.config import (
    ConsumerStatistics,
    Listener,
    PushConsumerConfig,
    QueueKey,
    normalize_subscriptions,
)
from pocketmq.client.consumer.hotpath import (
    ConcurrentConsumer,
    ListenerCall,
    OutcomeReports,
    WorkQueue,
)
from pocketmq.client.consumer.membership import Membership
from pocketmq.client.consumer.offsets import offset_store_for
from pocketmq.client.consumer.orderly import Lanes, QueueLocks
from pocketmq.client.consumer.pull import Puller
from pocketmq.client.consumer.rebalance import Rebalancer
from pocketmq.client.consumer.retry import RetryHandBack
from pocketmq.client.consumer.state import ConsumerState
from pocketmq.client.producer.config import ProducerConfig
from pocketmq.client.producer.sender import Sender
from pocketmq.errors import InvalidArgumentError
from pocketmq.names import validate_group_name
from pocketmq.protocol import RequestCode

__all__ = ["PushConsumer"]

log = logging.getLogger("pocketmq.client")


class PushConsumer(ClientBase):
    """Calls ``listener`` with the messages of ``subscriptions`` for consumer group ``group``.

    Use as ``async with PushConsumer(...)``: messages flow from ``start`` until ``aclose``, which
    finishes the messages in hand (up to ``close_timeout``) and commits the offsets.
    """

    _what = "consumer"

    def __init__(
        self,
        group: str,
        subscriptions: Mapping[str, str] | Sequence[str] | str,
        listener: Listener,
        *,
        servers: Sequence[str] | str | None = None,
        config: PushConsumerConfig | None = None,
        client: ClientConfig | None = None,
    ) -> None:
        super().__init__(resolve_config(servers, client), self._on_push)
        if not group:
            raise InvalidArgumentError("a consumer group is required")
        validate_group_name(group)
        self.group = group
        self.config = config or PushConsumerConfig()
        self.subscriptions = normalize_subscriptions(subscriptions)
        if not self.subscriptions:
            raise InvalidArgumentError("subscribe to at least one topic")
        state = self._state = ConsumerState(self, group, self.config)
        topics = dict(self.subscriptions)
        if state.clustering:
            topics["%RETRY%" + group] = "*"
        self._offsets = offset_store_for(state)
        self._reports = OutcomeReports(state)
        # send-backs and re-sends to the retry topic: one attempt each, the next step being
        # the fallback (docs/semantics.md, "send-back fails")
        hand_back = ProducerConfig(retries=0, send_timeout=self.client_config.request_timeout)
        retry = RetryHandBack(state, Sender(self.pool, self.routes, hand_back))
        call = ListenerCall(
            listener, self.config.consume_timeout, in_thread=self.config.listener_thread
        )
        self._membership = Membership(state, topics, self.subscriptions)
        self._workers = ConcurrentConsumer(state, call, self._reports, retry)
        orderly: tuple[QueueLocks, Lanes] | None = None
        if self.config.orderly:
            orderly = (QueueLocks(state), Lanes(state, call, self._reports, retry))
        self._locks: QueueLocks | None = orderly[0] if orderly else None
        self._lanes: Lanes | None = orderly[1] if orderly else None
        puller = Puller(state, self._offsets, orderly[1].dispatch if orderly else None)
        self._rebalancer = Rebalancer(
            state,
            topics=topics,
            subscriptions=self.subscriptions,
            membership=self._membership,
            offsets=self._offsets,
            puller=puller,
            orderly=orderly,
        )
        puller.broker_lost = self._rebalancer.soon
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group, take this consumer's share of the queues and start consuming.
        Raises if a subscribed topic has no route or the group is unknown."""
        state = self._state
        self._check_not_closed()
        if state.started:
            return
        self._offsets.load()
        state.work = WorkQueue(self.config.concurrency * 2)
        self._rebalancer.start()
        for topic in self.subscriptions:
            await self.routes.get(topic)
        if self._lanes is not None:
            await self._lanes.load_max_retries()
        await self._membership.heartbeat()
        await self._rebalancer.rebalance()
        state.started = True
        self.routes.start()
        workers = self._workers
        self._tasks += [
            asyncio.create_task(workers.worker()) for _ in range(self.config.concurrency)
        ]
        self._tasks += [
            asyncio.create_task(self._membership.heartbeat_forever()),
            asyncio.create_task(self._rebalancer.rebalance_forever()),
            asyncio.create_task(self._persist_forever()),
        ]
        if self._locks is not None:
            self._tasks.append(asyncio.create_task(self._rebalancer.renew_locks_forever()))

    async def aclose(self) -> None:
        """Stop pulling, finish the messages in hand (up to ``close_timeout``), commit the
        offsets, give back queue locks, leave the group and close the connections."""
        if self._closed:
            return
        self._closed = True
        state = self._state
        for pq in state.queues.values():  # stop pulling, finish what is in hand
            if pq.pull_task is not None:
                pq.pull_task.cancel()
        if state.work is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.work.join(), self.config.close_timeout)
        if self._lanes is not None:
            await self._lanes.wait(list(state.queues.values()), self.config.close_timeout)
        tasks = [*self._tasks, *state.background()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for pq in state.queues.values():
            self._offsets.mark(pq)
        self._reports.flush()
        await self._offsets.persist()
        if self._locks is not None:
            for pq in list(state.queues.values()):
                await self._locks.unlock(pq)
        await self._membership.unregister()
        # it owns nothing now: what was in hand is redelivered from the committed offsets, so
        # statistics() and assigned_queues say so (and a late completion commits nothing)
        for pq in state.queues.values():
            pq.dropped = True
        state.queues.clear()
        await self.close_base()

    def statistics(self) -> ConsumerStatistics:
        """Where messages went so far, and the queues and messages in hand now."""
        counters = self._state.counters
        queues = self._state.queues
        return ConsumerStatistics(
            consumed=counters.consumed,
            failed=counters.failed,
            sent_back=counters.sent_back,
            resent=counters.resent,
            local_retries=counters.local_retries,
            dropped_broadcast_failures=counters.broadcast_drops,
            dead_lettered=counters.dead_lettered,
            queues=len(queues),
            cached=sum(len(pq.messages) for pq in queues.values()),
            cached_bytes=sum(pq.held_bytes for pq in queues.values()),
        )

    @property
    def assigned_queues(self) -> list[QueueKey]:
        """The queues this consumer owns now, as ``(broker, topic, queue id)``."""
        return sorted(self._state.queues)

    # -- what runs in the background ------------------------------------------------------

    def _on_push(self, connection: ClientConnection, code: int, body: bytes) -> None:
        if code == RequestCode.CONSUMERS_CHANGED:
            self._rebalancer.soon()

    async def _persist_forever(self) -> None:
        """Report outcomes every second and commit offsets every ``offset_persist_interval``."""
        step = min(1.0, self.config.offset_persist_interval)
        ticks = 0
        while True:
            await asyncio.sleep(step)
            ticks += 1
            self._reports.flush()
            if ticks * step < self.config.offset_persist_interval:
                continue
            ticks = 0
            try:
                await self._offsets.persist()
            except Exception:
                log.exception("persisting offsets failed")
