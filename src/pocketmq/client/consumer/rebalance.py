"""Rebalancing: which of a topic's queues this consumer owns.

Clustering consumers divide the queues of each subscribed topic — and of the group's retry
topic — among the group's live members: sorted queues in contiguous blocks over sorted members
(RocketMQ's "allocate average"), computed the same by every member without talking to each
other. Broadcasting consumers own every queue. A rebalance runs at start, every
``rebalance_interval`` (20 s), and soon after the broker announces a membership change.

Taking a queue starts its pull loop (orderly consumers first take its broker lock); giving one
up stops the loop, lets an orderly lane finish the message in hand, commits the queue's offset
and gives the lock back, so the next owner starts where this one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

from pocketmq.client.consumer.config import QueueKey
from pocketmq.client.consumer.hotpath import ProcessQueue
from pocketmq.client.consumer.membership import Membership
from pocketmq.client.consumer.offsets import OffsetStore
from pocketmq.client.consumer.orderly import Lanes, QueueLocks, Wanted
from pocketmq.client.consumer.pull import Puller
from pocketmq.client.consumer.state import ConsumerState
from pocketmq.client.routes import QueueRef
from pocketmq.errors import PocketMQError

__all__ = ["Rebalancer", "allocate_average"]

log = logging.getLogger("pocketmq.client")


def allocate_average(
    queues: Sequence[QueueRef], consumers: Sequence[str], me: str
) -> list[QueueRef]:
    """My contiguous share of ``queues`` among ``consumers`` (both sorted the same everywhere)."""
    if me not in consumers or not queues:
        return []
    total, members = len(queues), len(consumers)
    index = consumers.index(me)
    base, extra = divmod(total, members)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return list(queues[start : start + size])


class Rebalancer:
    """Keeps the consumer's owned queues in line with its share."""

    def __init__(
        self,
        state: ConsumerState,
        *,
        topics: Mapping[str, str],
        subscriptions: Mapping[str, str],
        membership: Membership,
        offsets: OffsetStore,
        puller: Puller,
        orderly: tuple[QueueLocks, Lanes] | None,
    ) -> None:
        self._state = state
        self._topics = dict(topics)
        self._subscriptions = subscriptions
        self._membership = membership
        self._offsets = offsets
        self._puller = puller
        self._orderly = orderly
        self._lock = asyncio.Lock()
        self._soon: asyncio.Event | None = None

    def start(self) -> None:
        """From now on a membership change triggers a rebalance (see :meth:`soon`)."""
        self._soon = asyncio.Event()

    def soon(self) -> None:
        """Rebalance shortly: the group's membership changed."""
        if self._soon is not None:
            self._soon.set()

    async def rebalance(self) -> None:
        """Compute this consumer's share and take or give up queues to match it. A subscribed
        topic without a route raises; a retry topic not created yet is skipped."""
        state = self._state
        async with self._lock:
            desired: Wanted = {}
            for topic, expression in self._topics.items():
                try:
                    route = await state.client.routes.get(topic, refresh=state.started)
                except PocketMQError as exc:
                    if topic in self._subscriptions:
                        raise
                    log.debug("no route for %s yet: %s", topic, exc)
                    continue
                queues = sorted(route.readable, key=lambda q: q.key)
                if state.clustering:
                    members = await self._membership.members(route.addresses.values())
                    mine = allocate_average(queues, members, state.client_id)
                else:
                    mine = list(queues)
                for queue in mine:
                    desired[(queue.broker_name, topic, queue.queue_id)] = (
                        queue.address,
                        expression,
                    )
            for key in [k for k in state.queues if k not in desired]:
                await self.drop(key)
            for key, pq in state.queues.items():
                address = desired[key][0]
                if pq.address != address:  # the group's master is gone, or back
                    log.info("reading %s from %s now (was %s)", key, address, pq.address)
                    pq.address = address
            wanted = {k: v for k, v in desired.items() if k not in state.queues}
            if self._orderly is not None and wanted:
                wanted = await self._orderly[0].lock(wanted)
            for key, (address, expression) in wanted.items():
                pq = ProcessQueue(key, address, expression)
                state.queues[key] = pq
                pq.pull_task = asyncio.create_task(self._puller.run(pq))

    async def drop(self, key: QueueKey) -> None:
        """Give up queue ``key``: stop pulling, finish what is in hand (orderly), commit."""
        state = self._state
        pq = state.queues.pop(key)
        if pq.pull_task is not None:
            pq.pull_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pq.pull_task
        if self._orderly is not None:  # finish the message in hand, then let the next owner in
            await self._orderly[1].wait([pq], state.config.close_timeout)
        pq.dropped = True
        self._offsets.mark(pq)
        await self._offsets.persist(only={key})
        if self._orderly is not None:
            await self._orderly[0].unlock(pq)

    async def rebalance_forever(self) -> None:
        """Rebalance every ``rebalance_interval``, and soon after a membership change."""
        soon = self._soon
        assert soon is not None
        interval = self._state.config.rebalance_interval
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await soon.wait()
            soon.clear()
            await asyncio.sleep(0.05)  # let a burst of membership changes settle
            try:
                await self.rebalance()
            except PocketMQError as exc:
                log.warning("rebalance of group %s failed: %s", self._state.group, exc)

    async def renew_locks_forever(self) -> None:
        """Orderly consumers: renew the locks of owned queues; drop a queue whose lock was
        lost (another consumer may own it now)."""
        assert self._orderly is not None
        locks = self._orderly[0]
        state = self._state
        while True:
            await asyncio.sleep(state.config.lock_renew_interval)
            held = {k: (pq.address, pq.expression) for k, pq in state.queues.items()}
            if not held:
                continue
            kept = await locks.lock(held)
            for key in set(held) - set(kept):
                if key in state.queues:
                    log.warning("lost the lock of %s; dropping it", key)
                    await self.drop(key)
