"""Log lines about bad input, at most one per kind of problem per interval.

A client sending garbage in a loop must not be able to fill the broker's disk with log lines
(20,000 malformed frames once wrote 10 MB of tracebacks). Each kind of problem (a short key
chosen by the caller, never taken from the input) gets at most one line per ``interval``; the
next line that gets through says how many were held back meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RateLimitedLog"]


@dataclass(slots=True)
class _Window:
    last: float
    held_back: int = 0


class RateLimitedLog:
    """A logger wrapper: ``warning("key", "text %s", arg)`` logs unless "key" logged within
    ``interval`` seconds."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def log(
        self,
        level: int,
        key: str,
        message: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> bool:
        """Log unless ``key`` already logged within the interval; True when it was logged."""
        now = self._clock()
        window = self._windows.get(key)
        if window is not None and now - window.last < self._interval:
            window.held_back += 1
            return False
        held_back = window.held_back if window is not None else 0
        self._windows[key] = _Window(now)
        if held_back:
            message += " (%d more like this in the last %.0f s were not logged)"
            args = (*args, held_back, self._interval)
        self._logger.log(level, message, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, message: str, *args: object) -> bool:
        """A rate-limited WARNING line (see :meth:`log`)."""
        return self.log(logging.WARNING, key, message, *args)

    def error(
        self, key: str, message: str, *args: object, exc_info: BaseException | None = None
    ) -> bool:
        """A rate-limited ERROR line, with the traceback of ``exc_info`` when it gets through (see
        :meth:`log`)."""
        return self.log(logging.ERROR, key, message, *args, exc_info=exc_info)
