"""Log lines about a repeating store error, at most one per kind per interval.

A store that cannot write (a full disk, a descriptor limit) is asked again by every send: one
line per failed append filled a broker's log with 63 identical ERROR lines a second. Each kind
of error (a short key chosen by the caller) gets at most one line per ``interval``; the next
line that gets through says how many were held back meanwhile. (The server has the same idea
for bad client input, server/ratelog.py; the store does not import the server.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["LogRate"]


class LogRate:
    """``error("key", "text %s", arg)`` logs unless "key" logged within ``interval`` seconds
    (thread-safe: appends and the flusher thread share one)."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, level: int, key: str, message: str, *args: object) -> bool:
        """Log unless ``key`` already logged within the interval; True when it was logged."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            message += " (and %d more times in the last %.0f s)"
            args = (*args, held, self._interval)
        self._logger.log(level, message, *args)
        return True

    def error(self, key: str, message: str, *args: object) -> bool:
        """A rate-limited ERROR line (see :meth:`log`)."""
        return self.log(logging.ERROR, key, message, *args)
