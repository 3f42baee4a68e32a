"""Orderly consumption (``orderly=True``, RocketMQ 4.x style): queue locks and message-group lanes.

**Locks.** A queue is consumed only while this consumer holds its broker lock (60 s, renewed
every ``lock_renew_interval``), so a rebalance never lets two consumers work on one queue at
once: the next owner gets the lock only after this one finished the message in hand and
unlocked it, or after the lock expired.

**Lanes.** Within a queue each message group is a lane consumed one message at a time, in order;
different groups proceed in parallel (at most ``concurrency`` listener calls at once). A failure
suspends only that lane for ``suspend_time`` (1 s) and retries the same message; after the
group's max retries the message goes to the dead-letter queue and the lane moves on — or never,
when the group's max retries is -1 (docs/semantics.md, "Ordered messages").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time

from pocketmq import properties as props
from pocketmq.client.consumer.config import ConsumeContext, QueueKey
from pocketmq.client.consumer.hotpath import Consumption, ProcessQueue
from pocketmq.client.consumer.retry import FailedAttempt
from pocketmq.client.consumer.state import ConsumerState
from pocketmq.client.message import ConsumeStatus
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["Lanes", "QueueLocks", "Wanted"]

log = logging.getLogger("pocketmq.client")

Wanted = dict[QueueKey, tuple[str, str]]
"""Queues a rebalance wants: key -> (broker address, tag expression)."""

_DEFAULT_MAX_RETRIES = 16


class QueueLocks:
    """Takes and gives back the broker locks of queues."""

    def __init__(self, state: ConsumerState) -> None:
        self._state = state

    async def lock(self, wanted: Wanted) -> Wanted:
        """The part of ``wanted`` whose locks this consumer holds now (asked per broker)."""
        state = self._state
        by_address: dict[str, list[QueueKey]] = {}
        for key, (address, _) in wanted.items():
            by_address.setdefault(address, []).append(key)
        granted: Wanted = {}
        for address, keys in by_address.items():
            request = w.LockQueuesRequest(
                state.group, state.client_id, [w.QueueRef(k[1], k[2]) for k in keys]
            )
            try:
                reply = await state.call(
                    address, RequestCode.LOCK_QUEUES, request, w.LockQueuesResponse
                )
            except PocketMQError as exc:
                log.warning("locking queues on %s failed: %s", address, exc)
                continue
            held = {(q.topic, q.queue_id) for q in reply.granted}
            for key in keys:
                if (key[1], key[2]) in held:
                    granted[key] = wanted[key]
        return granted

    async def unlock(self, pq: ProcessQueue) -> None:
        """Give ``pq``'s lock back so the next owner can start at once (best effort)."""
        state = self._state
        request = w.LockQueuesRequest(
            state.group, state.client_id, [w.QueueRef(pq.key[1], pq.key[2])]
        )
        with contextlib.suppress(PocketMQError):
            await state.call(pq.address, RequestCode.UNLOCK_QUEUES, request, w.Empty)


class Lanes(Consumption):
    """The message-group lanes of every owned queue."""

    _max_retries = _DEFAULT_MAX_RETRIES

    @functools.cached_property
    def _slots(self) -> asyncio.Semaphore:
        """At most ``concurrency`` listener calls at once, over every lane."""
        return asyncio.Semaphore(self._state.config.concurrency)

    async def load_max_retries(self) -> None:
        """Read the group's max retries: when a lane gives a message up to the DLQ."""
        reply = await self._state.call_any(RequestCode.LIST_GROUPS, w.Empty(), w.ListGroupsResponse)
        for spec in reply.groups:
            if spec.name == self._state.group:
                self._max_retries = spec.max_retries
                return
        self._max_retries = _DEFAULT_MAX_RETRIES

    def dispatch(self, pq: ProcessQueue, messages: list[w.Delivered]) -> None:
        """Append pulled messages to their groups' lanes, starting lanes that are idle."""
        for message in messages:
            key = message.properties.get(props.MESSAGE_GROUP) or ""
            pq.lanes.setdefault(key, collections.deque()).append(message)
            if key not in pq.lane_tasks:
                pq.lane_tasks[key] = asyncio.create_task(self._run(pq, key))

    async def wait(self, pqs: list[ProcessQueue], timeout: float) -> None:
        """Let lanes finish the message in hand (lanes waiting to retry stop at once)."""
        for pq in pqs:
            pq.stopping.set()
        tasks = [t for pq in pqs for t in pq.lane_tasks.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
            for pq in pqs:
                for task in pq.lane_tasks.values():
                    task.cancel()

    async def _run(self, pq: ProcessQueue, key: str) -> None:
        lane = pq.lanes[key]
        try:
            while lane and not pq.stopping.is_set():
                message = lane[0]
                async with self._slots:
                    finished = await self._consume(pq, message)
                if finished:
                    lane.popleft()
                    pq.remove([message.queue_offset])  # flags pq for the next persist
                else:  # suspend this lane only; a close or rebalance cuts the wait short
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(pq.stopping.wait(), self._state.config.suspend_time)
        finally:
            if pq.lane_tasks.get(key) is asyncio.current_task():
                del pq.lane_tasks[key]
            if not lane:
                pq.lanes.pop(key, None)

    async def _consume(self, pq: ProcessQueue, message: w.Delivered) -> bool:
        """One attempt at the head of a lane; True once it is done with (consumed or DLQ)."""
        counters = self._state.counters
        view = pq.view(message)
        context = ConsumeContext(ack_index=0, queue=pq.key)
        started = time.time()
        status, outcome, error = await self._listener([view], context)
        if status is ConsumeStatus.SUCCESS:
            counters.consumed += 1
            self._reports.record(pq, [view], started)
            return True
        counters.failed += 1
        offset = message.queue_offset
        retries_used = pq.local_attempts.get(offset, 0)
        if self._max_retries >= 0 and retries_used >= self._max_retries:
            attempt = FailedAttempt(message, outcome, error, started)
            if await self._retry.hand_back(pq, attempt, -1):  # to the DLQ
                counters.dead_lettered += 1
                return True
            return False  # could not move it: never skip it silently
        pq.local_attempts[offset] = retries_used + 1
        counters.local_retries += 1
        return False
