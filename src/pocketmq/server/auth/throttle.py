"""Failed logins, throttled per source address (docs/security.md, "The native handshake").

Each source address has a token bucket of ``burst`` failures, refilled at ``rate`` tokens per
second; a failed login takes a token, a successful one none. An address with no token left is
refused *before its proof is checked* until a token refills: that is what bounds the guesses an
attacker gets (answering a wrong guess late would not, since a right one is answered at once).
OpenSSH's ``PerSourcePenalties`` does the same by address.

Memory is bounded: at most ``max_sources`` addresses are remembered; a bucket that refilled
completely is the same as none and is the first forgotten, then the least recently failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Final

from pocketmq.errors import InvalidArgumentError

__all__ = ["DEFAULT_FAILURE_BURST", "DEFAULT_FAILURE_RATE", "FailureThrottle"]

DEFAULT_FAILURE_BURST: Final = 10
DEFAULT_FAILURE_RATE: Final = 1.0  # tokens per second
_MAX_SOURCES: Final = 65_536


class FailureThrottle:
    """Token buckets of failed logins by source address (module doc)."""

    def __init__(
        self,
        burst: int = DEFAULT_FAILURE_BURST,
        rate: float = DEFAULT_FAILURE_RATE,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = _MAX_SOURCES,
    ) -> None:
        if burst < 1:
            raise InvalidArgumentError("auth_failure_burst must be at least 1")
        if not 0 < rate < math.inf:
            raise InvalidArgumentError("auth_failure_rate must be a positive number per second")
        self.burst = burst
        self.rate = rate
        self._clock = clock
        self._max = max_sources
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, as of when)

    def _tokens(self, source: str, now: float) -> float:
        found = self._buckets.get(source)
        if found is None:
            return float(self.burst)
        tokens, since = found
        return min(float(self.burst), tokens + (now - since) * self.rate)

    def wait(self, source: str) -> float:
        """0 when ``source`` may try to log in now, else the seconds until it may."""
        tokens = self._tokens(source, self._clock())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def failed(self, source: str) -> None:
        """``source`` failed a login: one token less."""
        now = self._clock()
        tokens = self._tokens(source, now)
        self._buckets.pop(source, None)  # re-inserted last: the most recently failed
        self._buckets[source] = (max(0.0, tokens - 1), now)
        if len(self._buckets) > self._max:
            self._forget(now)

    def _forget(self, now: float) -> None:
        full = [s for s in self._buckets if self._tokens(s, now) >= self.burst]
        for source in full:
            del self._buckets[source]
        while len(self._buckets) > self._max:
            del self._buckets[next(iter(self._buckets))]
