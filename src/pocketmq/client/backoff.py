"""Retry spacing for flow control: gRPC's connection-backoff algorithm (docs/semantics.md,
"Producer"; gRPC's "Connection Backoff Protocol" document).

Each attempt starts with a deadline: ``now + 1 s`` for the first, then ``now + backoff ± 20 %``
with the backoff growing 1.6× per attempt up to 120 s. An attempt may run until
``max(deadline, now + 20 s)`` (the minimum connect timeout); if it fails, the next one starts no
earlier than the deadline — so time spent in a slow attempt counts towards the wait. Only
TOO_MANY_REQUESTS is spaced out this way; other errors retry at once.

The schedule is pure: given the clock readings and a random source it yields the same deadlines,
so tests drive it with a fake clock and a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff", "BackoffSchedule"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """How flow-control refusals are spaced (defaults: gRPC's connection backoff); a
    ``ProducerConfig`` field, so tests and impatient callers can shorten it.
    """

    initial: float = 1.0
    multiplier: float = 1.6
    jitter: float = 0.2
    maximum: float = 120.0
    min_connect_timeout: float = 20.0

    def schedule(self, rng: random.Random | None = None) -> BackoffSchedule:
        """A fresh schedule for one send (each send backs off on its own)."""
        return BackoffSchedule(self, rng or random.Random())


class BackoffSchedule:
    """The deadlines of one send's attempts; pure, so a fake clock can drive it."""

    def __init__(self, policy: Backoff, rng: random.Random) -> None:
        self._policy = policy
        self._rng = rng
        self._backoff: float | None = None

    def start_attempt(self, now: float) -> tuple[float, float]:
        """Call as an attempt starts. Returns ``(retry_not_before, attempt_deadline)``."""
        policy = self._policy
        if self._backoff is None:
            self._backoff = policy.initial
            deadline = now + policy.initial
        else:
            self._backoff = min(self._backoff * policy.multiplier, policy.maximum)
            spread = policy.jitter * self._backoff
            deadline = now + self._backoff + self._rng.uniform(-spread, spread)
        return deadline, max(deadline, now + policy.min_connect_timeout)

    @property
    def current_backoff(self) -> float | None:
        """The backoff of the latest attempt (None before the first)."""
        return self._backoff
