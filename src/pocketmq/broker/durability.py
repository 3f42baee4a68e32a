"""Waiting for sync flush from asyncio, one store request per event-loop iteration.

Every writer that resumes in the same loop iteration appends, then registers here; the request
to the store goes out with ``call_soon``, i.e. after all of them ran, so one fsync covers the
whole group. Asking the store per writer instead starts an fsync for the first writer while the
others are still appending, and they wait a whole extra fsync (measured: 24 of 64 writers per
fsync instead of all 64).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

__all__ = ["DurabilityWaiter"]


class _Durable(Protocol):
    def when_durable(self, offset: int, callback: Callable[[bool], None]) -> None: ...


class DurabilityWaiter:
    def __init__(self, store: _Durable, flush_timeout: float) -> None:
        self._store = store
        self._flush_timeout = flush_timeout
        self._pending: list[tuple[int, asyncio.Future[bool]]] = []
        self._scheduled = False

    async def wait(self, offset: int) -> bool:
        """True once everything below ``offset`` is fsynced; False on failure or after the
        flush timeout (the message is stored but not known durable: FLUSH_DISK_TIMEOUT)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((offset, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._submit, loop)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self._flush_timeout)
        except TimeoutError:
            return False

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        target = max(offset for offset, _ in batch)

        def flushed(ok: bool) -> None:
            loop.call_soon_threadsafe(self._resolve, batch, ok)

        self._store.when_durable(target, flushed)

    @staticmethod
    def _resolve(batch: list[tuple[int, asyncio.Future[bool]]], ok: bool) -> None:
        for _, future in batch:
            if not future.done():
                future.set_result(ok)
