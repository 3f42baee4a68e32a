"""Merging many callers' requests into one (docs/proxy.md, "Batching"; docs/design.md, "Sending").

A gRPC adapter serves many official clients, each sending one message (or acking a few) per RPC.
The broker's cost is mostly per request, not per message, so at most one request of each kind is
in flight and everything that arrives meanwhile rides in the next one, like a disk's group
commit: an idle adapter adds no delay (a lone request leaves from its caller's task), a busy one
sends fewer, larger requests. Each caller gets back exactly the results of its own items, in
order. The gRPC adapter's sends (server/grpc/merging.py) and the proxy's acks use it.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["BATCH_BUCKETS", "BatchSizes", "Batcher"]

I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R")  # its result


BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Upper bounds of ``pocketmq_proxy_batch_size``'s buckets (entries per merged request)."""


class BatchSizes:
    """How many entries each merged request carried, per kind (``send``, ``ack``): the proxy's
    ``/metrics`` shows how much merging the load gives (docs/operations.md, "Proxies")."""

    def __init__(self) -> None:
        # kind -> counts per BATCH_BUCKETS bucket (the last: larger), and the entries in all
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, int] = {}

    def observe(self, kind: str, size: int) -> None:
        """One request of ``kind`` carried ``size`` entries."""
        counts = self.counts.get(kind)
        if counts is None:
            counts = self.counts[kind] = [0] * (len(BATCH_BUCKETS) + 1)
            self.sums[kind] = 0
        counts[bisect_left(BATCH_BUCKETS, size)] += 1
        self.sums[kind] += size


class Batcher(Generic[I, R]):
    """Runs ``call`` on merged batches of at most ``max_batch`` items and ``max_bytes`` (by
    ``size``; one caller's items always go whole), one batch at a time (module doc). ``call``
    answers one result per item; if it raises, every caller of that batch gets the exception.
    ``observe`` hears the size of each merged request (the proxy's metrics)."""

    def __init__(
        self,
        call: Callable[[list[I]], Awaitable[list[R]]],
        max_batch: int,
        *,
        max_bytes: int = 0,
        size: Callable[[I], int] | None = None,
        observe: Callable[[int], None] | None = None,
    ) -> None:
        self._call = call
        self._observe = observe  # hears each merged request's size
        self._max = max_batch
        self._max_bytes = max_bytes
        self._size = size
        self._waiting: deque[tuple[list[I], asyncio.Future[list[R]]]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._alone = False  # a batch sent from its caller's task is in flight (submit)

    async def submit(self, items: list[I]) -> list[R]:
        """``items``' results, once a batch carrying them was answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[R]] = loop.create_future()
        if self._task is None and not self._alone:
            # nothing in flight: leave at once from the caller's own task (no wait for a loop
            # turn); what arrives before this one is answered, and until the end of the loop
            # turn it ends in (a call that never waits), rides in the next batch
            self._alone = True
            try:
                await self._run([(items, future)])
            finally:
                loop.call_soon(self._after_alone)
            return future.result()
        self._waiting.append((items, future))
        return await future

    def _after_alone(self) -> None:
        self._alone = False
        if self._waiting and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch: list[tuple[list[I], asyncio.Future[list[R]]]] = []
                count = weight = 0
                while self._waiting:
                    items = self._waiting[0][0]
                    more = self._weight(items)
                    if batch and (
                        count + len(items) > self._max
                        or (self._max_bytes and weight + more > self._max_bytes)
                    ):
                        break
                    batch.append(self._waiting.popleft())
                    count += len(items)
                    weight += more
                await self._run(batch)
        finally:
            self._task = None

    def _weight(self, items: list[I]) -> int:
        size = self._size
        return sum(size(item) for item in items) if size is not None else 0

    async def _run(self, batch: list[tuple[list[I], asyncio.Future[list[R]]]]) -> None:
        merged = [item for items, _ in batch for item in items]
        if self._observe is not None:
            self._observe(len(merged))
        try:
            results = await self._call(merged)
            if len(results) != len(merged):
                raise RuntimeError(f"{len(merged)} items answered with {len(results)} results")
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for items, future in batch:
            if not future.done():  # a caller that gave up (its RPC was cancelled) is skipped
                future.set_result(results[start : start + len(items)])
            start += len(items)
