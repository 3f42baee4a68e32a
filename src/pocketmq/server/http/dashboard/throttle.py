"""Wrong sign-ins slowed down per source address (docs/security.md, "Dashboard and HTTP API").

Each address has a token bucket: ``burst`` wrong sign-ins at once, then one more every
``1 / rate`` seconds. Only wrong sign-ins take a token; while an address has none, its sign-ins
are answered 429 without being checked (so guessing gets no answer faster than the rate), and a
correct sign-in from any other address is never held up. Behind a reverse proxy every client has
the proxy's address: throttle there.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["DEFAULT_BURST", "DEFAULT_RATE", "SignInThrottle"]

DEFAULT_BURST = 10
DEFAULT_RATE = 0.2  # wrong sign-ins per second per address once the burst is spent: 12 a minute


class SignInThrottle:
    """Token buckets of wrong sign-ins, by source address (module doc)."""

    def __init__(
        self,
        burst: int = DEFAULT_BURST,
        rate: float = DEFAULT_RATE,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = 10_000,
    ) -> None:
        self._burst = burst
        self._rate = rate
        self._clock = clock
        self._max = max_addresses
        # address -> (tokens, when they were counted); least recently wrong first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _tokens(self, address: str, now: float) -> float:
        tokens, then = self._buckets.get(address, (float(self._burst), now))
        return min(float(self._burst), tokens + (now - then) * self._rate)

    def wait(self, address: str) -> float:
        """0 when ``address`` may try to sign in now, else the seconds until it may."""
        tokens = self._tokens(address, self._clock())
        if tokens >= 1:
            return 0.0
        return (1 - tokens) / self._rate

    def failed(self, address: str) -> None:
        """A wrong sign-in from ``address``: it takes a token."""
        now = self._clock()
        tokens = self._tokens(address, now)
        self._buckets.pop(address, None)
        self._buckets[address] = (max(0.0, tokens - 1), now)
        while len(self._buckets) > self._max:
            # the least recently wrong address goes first (its bucket has refilled the most)
            self._buckets.popitem(last=False)

    @staticmethod
    def retry_after(seconds: float) -> str:
        """A ``Retry-After`` header's value: whole seconds, at least 1."""
        return str(max(1, math.ceil(seconds)))
