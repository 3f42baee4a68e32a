"""A background task that runs one step now and then: the shape shared by relay and scheduler.

Why one base: both are resources (docs/reliability.md "Resources": async context managers with
``aclose()`` and a lifecycle) that run ``run_once()`` in a loop, sleep for an interval or until
woken, and must survive a failing step (the database restarts, the broker is away) without dying
silently. Tests never use the loop: they call ``run_once()`` with a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from abc import ABC, abstractmethod

from pocketmq.errors import ClosedError, InvalidArgumentError
from pocketmq.reliability._resource import AsyncResource

__all__ = ["Lifecycle", "PeriodicWorker"]


class Lifecycle(enum.Enum):
    """Where a worker is: created, running its loop, or closed for good."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"


class PeriodicWorker(AsyncResource, ABC):
    """Runs :meth:`run_once` every ``interval`` seconds, or sooner after :meth:`wakeup`."""

    name = "worker"

    def __init__(self, *, interval: float) -> None:
        if interval <= 0:
            raise InvalidArgumentError("interval must be positive")
        self.interval = interval
        self.lifecycle = Lifecycle.CREATED
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log = logging.getLogger(f"pocketmq.reliability.{self.name}")

    @abstractmethod
    async def run_once(self) -> object:
        """One step; the loop logs and survives its exceptions."""

    def wakeup(self) -> None:
        """Run the next step now instead of after the interval."""
        self._wake.set()

    async def start(self) -> None:
        """Start the loop (again a no-op while it runs; a closed worker cannot restart)."""
        if self.lifecycle is Lifecycle.CLOSED:
            raise ClosedError(f"{self.name} is closed")
        if self.lifecycle is Lifecycle.RUNNING:
            return
        self._on_start()
        self.lifecycle = Lifecycle.RUNNING
        self._task = asyncio.create_task(self._loop(), name=f"pocketmq-{self.name}")

    def _on_start(self) -> None:
        """Hook for subclasses (register listeners)."""

    def _on_close(self) -> None:
        """Hook for subclasses (unregister listeners)."""

    async def aclose(self) -> None:
        """Stop the loop for good, waiting for a step in progress to be cancelled."""
        if self.lifecycle is Lifecycle.CLOSED:
            return
        was_running = self.lifecycle is Lifecycle.RUNNING
        self.lifecycle = Lifecycle.CLOSED
        if was_running:
            self._on_close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                self._log.exception("%s step failed; retrying in %.1f s", self.name, self.interval)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
