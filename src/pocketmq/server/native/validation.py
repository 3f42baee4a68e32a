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

__all__ = ["attempt_problem", "attempts_out_of_range", "timestamp_problem"]

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


def attempts_out_of_range(records: list[w.Attempt]) -> list[w.Attempt]:
    """The records :func:`attempt_problem` refuses, found in one pass without a call per record:
    a push consumer reports 256 at a time, all in range (docs/benchmarks.md, "Broker CPU per
    consumed message, wall clock"); the refused ones are then named by :func:`attempt_problem`."""
    top = MAX_TIMESTAMP_MS
    return [
        a
        for a in records
        if not (
            0 <= a.attempt <= MAX_ATTEMPT
            and 0 <= a.delivered_at <= top
            and 0 <= a.finished_at <= top
        )
    ]
