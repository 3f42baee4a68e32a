"""The push consumer's work queue: batches waiting for a worker.

Not an ``asyncio.Queue``: a pull brings up to ``pull_batch`` messages, each its own batch
(RocketMQ calls the listener with one message by default), and an ``asyncio.Queue`` bounded at
twice the workers blocks the puller again after every message a worker takes — a task switch
and a future per consumed message. Here a pull's batches go in with one :meth:`WorkQueue.put_many`
once the queue has room, and the waiting puller is woken only when the queue has drained to half
its bound. What it holds stays bounded (``bound + one pull``), and the process queues keep
bounding what a consumer holds in memory (``max_cached_per_queue``).

Idle workers are woken one at a time, each woken one waking the next while items remain (as
it takes its own), not one per item put as ``asyncio.Queue`` does: a listener that returns
without awaiting lets one worker take a whole pull in one turn, and the other workers woken
for it found nothing — up to ``concurrency`` wake-ups per pull that a profile put at a tenth of
a default consumer's CPU (docs/benchmarks.md, "The push consumer's client CPU per message").
A listener that awaits still has every batch taken by a worker of its own, one loop turn
later per worker.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["WorkQueue"]

T = TypeVar("T")


class WorkQueue(Generic[T]):
    """A bounded FIFO of work items with ``join`` (every item taken was marked done)."""

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise ValueError("bound must be positive")
        self._bound = bound
        self._items: collections.deque[T] = collections.deque()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._putters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._unfinished = 0
        self._woken = 0  # getters woken that have not run yet: they wake the next in turn
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, item: T) -> None:
        """Add one item, waiting while the queue is at its bound."""
        await self.put_many((item,))

    async def put_many(self, items: Iterable[T]) -> None:
        """Add ``items`` together, in order, once the queue is below its bound."""
        while len(self._items) >= self._bound:
            waiter = asyncio.get_running_loop().create_future()
            self._putters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.cancelled():  # woken, then cancelled: pass the turn on
                    self._wake(self._putters)
                raise
            finally:
                if waiter in self._putters:
                    self._putters.remove(waiter)
        self.put_now(items)

    def has_room(self) -> bool:
        """Whether items may be added now: below the bound, and no :meth:`put_many` waiting
        for room (it is not overtaken)."""
        return len(self._items) < self._bound and not self._putters

    def put_now(self, items: Iterable[T]) -> None:
        """Add ``items`` together, in order, without waiting: for a caller that checked
        :meth:`has_room` (a pull's answer handed on as it is read, client/consumer/pull.py),
        so the queue stays within ``bound + one pull`` as with :meth:`put_many`."""
        before = len(self._items)
        self._items.extend(items)
        added = len(self._items) - before
        if added:
            self._unfinished += added
            self._idle.clear()
            if self._getters and not self._woken:
                self._wake_getter()

    def take(self) -> T | None:
        """The oldest item, or None when there is none (:meth:`get` without waiting, and
        without a coroutine: a worker takes a waiting batch this way). Items are never None."""
        items = self._items
        if not items:
            return None
        item = items.popleft()
        if self._putters and len(items) <= self._bound // 2:
            self._wake(self._putters)
        return item

    async def get(self) -> T:
        """Take the oldest item, waiting while there is none."""
        items = self._items
        while not items:
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.cancelled():  # woken, then cancelled: pass it on
                    self._woken -= 1
                    if items and self._getters and not self._woken:
                        self._wake_getter()
                raise
            finally:
                if waiter in self._getters:
                    self._getters.remove(waiter)
            self._woken -= 1
        item = items.popleft()
        if self._putters and len(items) <= self._bound // 2:
            self._wake(self._putters)
        if items and self._getters and not self._woken:  # the next idle worker, in turn
            self._wake_getter()
        return item

    def task_done(self) -> None:
        """One item taken by :meth:`get` is finished."""
        if self._unfinished <= 0:
            raise ValueError("task_done() called more often than items were taken")
        self._unfinished -= 1
        if self._unfinished == 0:
            self._idle.set()

    async def join(self) -> None:
        """Wait until every item put was taken and marked done."""
        await self._idle.wait()

    def _wake_getter(self) -> None:
        if self._wake(self._getters):
            self._woken += 1

    @staticmethod
    def _wake(waiters: collections.deque[asyncio.Future[None]]) -> bool:
        """Wake the first waiter not cancelled; whether there was one."""
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return True
        return False
