"""Range checks at the edge for what is not a message: a reported delivery attempt's numbers.

A message's own fields are the send contract's (pocketmq.contract), checked by the broker for
every protocol. A push consumer's attempt reports go into the attempt history as they are, so
their times and attempt numbers are checked here, where they arrive, with a typed error naming
the value (docs/protocol.md, "Messages on the wire").
"""

from __future__ import annotations

from typing import Final

from pocketmq.contract import MAX_TIMESTAMP_MS
from pocketmq.protocol import structs as w

__all__ = ["attempt_problem", "timestamp_problem"]

MAX_ATTEMPT: Final = 2**31 - 1


def timestamp_problem(value: int, what: str) -> str | None:
    """Why ``value`` is no epoch time in milliseconds, or None."""
    if not 0 <= value <= MAX_TIMESTAMP_MS:
        return f"{what} {value} is not an epoch time in milliseconds"
    return None


def attempt_problem(record: w.Attempt) -> str | None:
    """Why a reported delivery attempt cannot go into the attempt history, or None."""
    if not 0 <= record.attempt <= MAX_ATTEMPT:
        return f"attempt {record.attempt} outside 0..{MAX_ATTEMPT}"
    return timestamp_problem(record.delivered_at, "delivered_at") or timestamp_problem(
        record.finished_at, "finished_at"
    )
