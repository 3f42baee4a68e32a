"""Waiting for sync flush from asyncio, one store request per event-loop iteration.

Every writer that resumes in the same loop iteration appends, then registers here; the request
to the store goes out with ``call_soon``, i.e. after all of them ran, so one fsync covers the
whole group. Asking the store per writer instead starts an fsync for the first writer while the
others are still appending, and they wait a whole extra fsync (measured: 24 of 64 writers per
fsync instead of all 64). One timer per batch enforces the flush timeout, so a waiter costs a
future and nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

__all__ = ["DurabilityWaiter"]


class _Durable(Protocol):
    def when_durable(self, offset: int, callback: Callable[[bool], None]) -> None: ...


class DurabilityWaiter:
    """Group commit from the event loop (module doc): a sync-flush send waits here, and every waiter
    of one loop iteration shares one request to the flusher."""

    def __init__(self, store: _Durable, flush_timeout: float) -> None:
        self._store = store
        self._flush_timeout = flush_timeout
        self._pending: list[asyncio.Future[bool]] = []
        self._target = 0
        self._scheduled = False

    async def wait(self, offset: int) -> bool:
        """True once everything below ``offset`` is fsynced; False on failure or after the
        flush timeout (the message is stored but not known durable: FLUSH_DISK_TIMEOUT)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append(future)
        if offset > self._target:
            self._target = offset
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._submit, loop)
        return await future

    def _submit(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        target, self._target = self._target, 0
        if not batch:
            return
        timer = loop.call_later(self._flush_timeout, self._resolve, batch, False, None)

        def flushed(ok: bool) -> None:
            loop.call_soon_threadsafe(self._resolve, batch, ok, timer)

        self._store.when_durable(target, flushed)

    @staticmethod
    def _resolve(
        batch: list[asyncio.Future[bool]], ok: bool, timer: asyncio.TimerHandle | None
    ) -> None:
        if timer is not None:
            timer.cancel()
        for future in batch:
            if not future.done():
                future.set_result(ok)
