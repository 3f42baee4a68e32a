"""When to send a stub again, and when to give up and call a human.

The next resend time must include how long the message may sit queued behind a consumer
backlog, or it may be resent before it was even consumed (docs/reliability.md "Resend scheduler
and manual handling"). So the rule has two parts:

* an exponential interval by send count: ``base_interval * multiplier ** (send_count - 1)``,
  capped at ``max_interval`` (defaults 30 s, ×2, 1 h: 30 s, 1 min, 2 min, 4 min, 8 min ...);
* plus a backlog estimate from a pluggable :class:`BacklogEstimator` for the queue the message
  was stored in (default: none, 0 s). A real estimator asks the broker for the consumer group's
  lag on that queue and divides by the group's consume rate.

``max_sends`` (default 5) bounds the attempts; a stub that reaches it goes to manual handling.
``offset_wait`` is the liveness fallback of docs/reliability.md ("Deviations", 5): the strict rule
resends a stored-but-lost message only once the consumer has logged a *later* offset on the same
queue, which never happens if the lost message was the last one on its queue; after
``offset_wait`` seconds past its resend time the stub is resent anyway (``None`` restores the
strict rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from pocketmq.errors import InvalidArgumentError

__all__ = ["BacklogEstimator", "NoBacklog", "ResendPolicy"]


@runtime_checkable
class BacklogEstimator(Protocol):
    """Estimates how long a newly stored message waits before its consumer reaches it.

    Without it a message queued behind a backlog would be resent before the consumer could
    possibly have seen it (docs/reliability.md, "Resend scheduler and manual handling").
    """

    async def estimated_delay(self, topic: str, broker_name: str, queue_id: int) -> float:
        """Seconds of consumer backlog on this queue (0 when unknown)."""
        ...


class NoBacklog:
    """The default estimator: assumes consumers keep up (0 s), until a real estimate is plugged
    in."""

    async def estimated_delay(self, topic: str, broker_name: str, queue_id: int) -> float:
        """Always 0 s: without a real estimate, resend on the exponential schedule alone."""
        return 0.0

    def __repr__(self) -> str:
        return "NoBacklog()"


@dataclass(frozen=True, kw_only=True, slots=True)
class ResendPolicy:
    """The timing rules of the relay, the resend scheduler and the Spark resend job.

    One policy for every sender of a stub table, so that a stub's next resend time does not
    depend on which of them sent it last. Seconds are floats; the defaults are docs/reliability.md
    "Defaults".
    """

    max_sends: int = 5
    base_interval: float = 30.0
    multiplier: float = 2.0
    max_interval: float = 3600.0
    #: a sender claims a stub for this long before sending; a crashed sender's claim expires
    claim_timeout: float = 30.0
    #: resend a stored stub after this long even without proof that the consumer passed it
    offset_wait: float | None = 600.0

    def __post_init__(self) -> None:
        if self.max_sends < 1:
            raise InvalidArgumentError("max_sends must be at least 1")
        if self.base_interval <= 0 or self.max_interval < self.base_interval:
            raise InvalidArgumentError("need 0 < base_interval <= max_interval")
        if self.multiplier < 1:
            raise InvalidArgumentError("multiplier must be at least 1")
        if self.claim_timeout <= 0:
            raise InvalidArgumentError("claim_timeout must be positive")
        if self.offset_wait is not None and self.offset_wait < 0:
            raise InvalidArgumentError("offset_wait must be non-negative or None")

    def interval(self, send_count: int) -> float:
        """Seconds to wait after the ``send_count``-th send (1-based) before the next one."""
        exponent = max(send_count, 1) - 1
        # cap before the power overflows for large counts
        value = self.base_interval
        for _ in range(exponent):
            value *= self.multiplier
            if value >= self.max_interval:
                return self.max_interval
        return min(value, self.max_interval)

    def next_resend_at(self, now: datetime, send_count: int, backlog: float = 0.0) -> datetime:
        """When a stub sent for the ``send_count``-th time becomes due again."""
        return now + timedelta(seconds=self.interval(send_count) + max(backlog, 0.0))
