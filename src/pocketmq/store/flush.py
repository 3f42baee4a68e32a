"""The flusher thread: periodic fsync (async mode) and group commit (sync mode).

In sync mode a writer registers "tell me when offset X is durable" and the flusher fsyncs
everything written so far in one go: appends that arrive while an fsync runs are covered by the
next one, so 64 concurrent writers share a handful of fsyncs instead of paying 64. The same thread
writes the checkpoint, so the writing thread never waits for metadata.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from pocketmq.store.files import SyncError
from pocketmq.store.lograte import LogRate

__all__ = ["FlushService", "FlushTarget"]

log = logging.getLogger("pocketmq.store")
_errors = LogRate(log)  # a full disk fails the checkpoint every second: one line a minute

FlushCallback = Callable[[bool], None]


class FlushTarget(Protocol):
    """What the flusher drives (implemented by the store)."""

    def written_position(self) -> int:
        """How far the log has been written, i.e. what an fsync now would cover."""

    def sync_log(self, target: int) -> None:
        """Make the log durable up to ``target`` (and record that in the flush marker)."""

    def write_checkpoint(self) -> None:
        """Write the checkpoint, from the flusher thread so writers never wait for it."""


class FlushService:
    """The one thread that fsyncs the log and writes the checkpoint, so appends on the event loop
    never block on the disk; in sync mode it batches waiters into group commits."""

    def __init__(
        self,
        target: FlushTarget,
        *,
        flushed: int,
        interval: float,
        checkpoint_interval: float,
        sync_mode: bool,
    ) -> None:
        self._target = target
        self._interval = interval
        self._checkpoint_interval = checkpoint_interval
        self._sync_mode = sync_mode
        self._cond = threading.Condition()
        self._waiters: list[tuple[int, int, FlushCallback]] = []
        self._sequence = itertools.count()
        self._kicked = False
        self._stopping = False
        self.flushed = flushed
        self.failed: BaseException | None = None
        self.fsync_count = 0
        self.fsync_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="pocketmq-flush", daemon=True)

    def start(self) -> None:
        """Start the flusher thread (after recovery, before the first append)."""
        self._thread.start()

    def when_durable(self, offset: int, callback: FlushCallback) -> None:
        """Call ``callback(True)`` once everything below ``offset`` is fsynced (``False`` if the
        store failed). The callback runs on the flusher thread, or here if already durable."""
        with self._cond:
            if offset <= self.flushed:
                ready = True
            elif self.failed is not None or self._stopping:
                ready = False
            else:
                heapq.heappush(self._waiters, (offset, next(self._sequence), callback))
                self._cond.notify()
                return
        callback(ready)

    def kick(self) -> None:
        """Flush soon (the dirty-bytes threshold was crossed)."""
        with self._cond:
            if not self._kicked:
                self._kicked = True
                self._cond.notify()

    def stop(self) -> None:
        """Wake the thread to finish its last flush and wait for it, so shutdown leaves the log
        durable."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self._checkpoint_interval
        while True:
            with self._cond:
                if not (self._waiters or self._kicked or self._stopping):
                    if self._sync_mode:
                        timeout = max(0.0, next_checkpoint - time.monotonic())
                    else:
                        timeout = self._interval
                    self._cond.wait(timeout)
                self._kicked = False
                stopping = self._stopping
            target = self._target.written_position()
            ok = True
            if target > self.flushed:
                started = time.perf_counter()
                try:
                    self._target.sync_log(target)
                except OSError as exc:  # an fsync error means data may be lost: stop writing
                    self.failed = exc
                    ok = False
                self.fsync_count += 1
                self.fsync_seconds += time.perf_counter() - started
            ready: list[FlushCallback] = []
            with self._cond:
                if ok:
                    self.flushed = max(self.flushed, target)
                limit = self.flushed if ok else float("inf")
                while self._waiters and self._waiters[0][0] <= limit:
                    ready.append(heapq.heappop(self._waiters)[2])
            for callback in ready:
                callback(ok)
            now = time.monotonic()
            if ok and (now >= next_checkpoint or stopping):
                try:
                    self._target.write_checkpoint()
                except SyncError as exc:  # durability unknown: the store stopped writes
                    self.failed = exc
                    ok = False
                except OSError as exc:  # e.g. no room for checkpoint.tmp: the old one stands
                    _errors.error("checkpoint", "writing the checkpoint failed (retried): %s", exc)
                next_checkpoint = now + self._checkpoint_interval
            if stopping or not ok:
                with self._cond:
                    rest = [callback for _, _, callback in self._waiters]
                    self._waiters.clear()
                for callback in rest:
                    callback(False)
                return
