"""Where the toolkit gets "now" from, so timing rules can be tested without sleeping.

Every timestamp the toolkit writes is UTC and timezone-naive, because that is what the tables
store (``TIMESTAMP`` without time zone; the Spark pipeline reads the same columns). Keeping one
representation end to end avoids the classic bug of comparing an aware ``datetime`` with a naive
one read back from the database. The resend scheduler, the relay and the consumer wrapper all take
a :class:`Clock`; tests pass a :class:`FakeClock` and move it with :meth:`FakeClock.advance`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "FakeClock", "SystemClock", "as_of", "utc_naive", "utcnow"]


def utcnow() -> datetime:
    """The current UTC time, timezone-naive (the tables' representation)."""
    return datetime.now(UTC).replace(tzinfo=None)


def utc_naive(moment: datetime) -> datetime:
    """``moment`` in the tables' representation: naive UTC (naive input is taken as UTC)."""
    if moment.tzinfo is not None:
        return moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def as_of(now: datetime | None) -> datetime:
    """The instant a job evaluates at: ``now`` as naive UTC, or the current time when None.

    Why a function: every batch job (reconcile, audit, DLQ report) takes an optional ``--now``
    so that a run can be reproduced, and all of them must read it the same way.
    """
    return utcnow() if now is None else utc_naive(now)


@runtime_checkable
class Clock(Protocol):
    """A source of the current time as a naive UTC ``datetime``, so timing rules can be tested
    with a :class:`FakeClock` instead of sleeping."""

    def now(self) -> datetime:
        """The current time, naive UTC (the tables' representation)."""


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        """The wall clock, naive UTC."""
        return utcnow()

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that moves only when told to (for tests and simulations)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc_naive(start) if start is not None else datetime(2026, 1, 1)

    def now(self) -> datetime:
        """The time this clock was set or advanced to."""
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds`` and return the new time."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (naive UTC)."""
        self._now = when

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"
