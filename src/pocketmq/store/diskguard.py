"""The free-space guard: refuse writes while the disk is (nearly) full, and say so once.

Writes are refused (``DISK_FULL``) while the file system holding the store has less free space
than ``min_free_disk_bytes`` (``statvfs``: blocks free for the broker's user, so what the store's
files really reserve is counted), and after a write or an allocation failed with ``ENOSPC``
until there is room for what it needed on top of that floor. The guard logs one WARNING when it
engages and one when it clears, and tells the broker's ``/readyz``, status and metrics; the free
space is read at most once a second (docs/operations.md, "A full disk").

An ``ENOSPC`` while ``statvfs`` still shows room for what failed (a disk quota, a
thin-provisioned volume, another process filling the disk a moment ago) refuses that write
alone and is logged at most once a minute: the guard engages only when the free space agrees,
so it never flaps between engaged and clear on every send.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from pocketmq.store.lograte import LogRate

__all__ = ["DiskGuard"]

log = logging.getLogger("pocketmq.store")

_RECHECK = 1.0  # seconds between two reads of the free space


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


class DiskGuard:
    """Whether the store may write, as far as disk space goes (module docstring).

    ``measure`` returns the free bytes (default: ``statvfs`` of ``directory``); ``clock`` is
    monotonic. Thread-safe: appends and the broker's probes ask it from different threads.
    """

    def __init__(
        self,
        directory: str,
        min_free: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        measure: Callable[[], int] | None = None,
    ) -> None:
        self._directory = directory
        self.min_free = min_free
        self._clock = clock
        self._measure_free = measure or self._statvfs
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._needed = 0  # what a failed allocation asked for, on top of min_free
        self._errors = LogRate(log)
        self.reason = ""
        """Why writes are refused ("disk: ..."); "" while they are accepted."""
        self.free_bytes = -1
        """Free bytes at the last look (-1: not known)."""
        self.engagements = 0

    def refusal(self) -> str:
        """ "" when writes may go on, else why not (reads the free space when it is due)."""
        now = self._clock()
        if now - self._checked_at < _RECHECK:
            # not due (nearly every append): no lock. Appends ask under the store's lock, as
            # the writer's no_space runs, so an append never reads a half-made engagement; a
            # status read from another thread may see the reason of a moment before
            return self.reason
        with self._lock:
            if now - self._checked_at >= _RECHECK:
                self._checked_at = now
                self._look()
            return self.reason

    def no_space(self, needed: int, what: str, exc: OSError) -> None:
        """``what`` failed with ENOSPC (or EDQUOT) asking for ``needed`` bytes: refuse writes
        until that much is free above the floor (module docstring: unless the free space says
        there is room, then only this write failed)."""
        now = self._clock()
        with self._lock:
            free = self._free()
            if free >= self.min_free + needed:
                self._errors.error(
                    "enospc",
                    "%s failed (%s) although %s are free on %s (a disk quota? a thin-provisioned "
                    "volume?); the messages it held were refused",
                    what,
                    exc.strerror or exc,
                    _mib(free),
                    self._directory,
                )
                return
            self._needed = max(self._needed, needed)
            self._checked_at = now
            self.free_bytes = free
            floor = self.min_free + self._needed
            self._engage(
                f"{what} failed ({exc.strerror or exc})",
                f"; {_mib(free) if free >= 0 else '?'} free on {self._directory}, waiting for "
                f"{_mib(floor)} (min_free_disk_bytes {_mib(self.min_free)} + "
                f"{_mib(self._needed)} for the file)",
            )

    def _look(self) -> None:
        free = self._free()
        if free < 0:
            return  # cannot tell: keep the state we had
        self.free_bytes = free
        floor = self.min_free + self._needed
        if free < floor:
            self._engage(
                f"{_mib(free)} free, below the {_mib(floor)} floor",
                f"on {self._directory} (min_free_disk_bytes"
                + (f" + {_mib(self._needed)} for a file)" if self._needed else ")"),
            )
        elif self.reason:
            self.reason = ""
            self._needed = 0
            log.warning(
                "the store accepts writes again: %s free on %s (floor %s)",
                _mib(free),
                self._directory,
                _mib(floor),
            )

    def _engage(self, cause: str, detail: str) -> None:
        engaging = not self.reason
        self.reason = f"disk: {cause}"
        if not engaging:
            return
        self.engagements += 1
        log.warning(
            "the store refuses writes: %s %s. Sends are answered DISK_FULL (wire STORAGE_FULL) "
            "and /readyz says 503 until space is freed; reads go on",
            self.reason,
            detail,
        )

    def _free(self) -> int:
        try:
            return self._measure_free()
        except OSError:
            return -1

    def _statvfs(self) -> int:
        stats = os.statvfs(self._directory)
        return stats.f_bavail * stats.f_frsize
