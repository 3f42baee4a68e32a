"""Range checks at the edge: values a client may send that the wire format allows but the broker
cannot store or compute with.

The wire carries 64-bit integers and doubles; the store's record has a 32-bit ``flags`` field
(docs/storage-format.md §1), and a retry multiplier of ``1e308`` or ``nan`` would only fail when
the first retry is scheduled. Checking here gives the client a typed error naming the value, at
the moment it sends it — for a batch, an error for that message alone (docs/protocol.md
"Messages on the wire").
"""

from __future__ import annotations

from typing import Final

from pocketmq.broker import InboundMessage
from pocketmq.protocol import structs as w
from pocketmq.protocol.checks import retry_policy_problem

__all__ = [
    "MAX_FLAGS",
    "MAX_TIMESTAMP_MS",
    "attempt_problem",
    "message_problem",
    "retry_policy_problem",
    "timestamp_problem",
]

MAX_FLAGS: Final = 0xFFFF_FFFF  # the record's u32 flags
MAX_TIMESTAMP_MS: Final = 2**63 - 1  # epoch ms, a signed 64-bit value as every client has
MAX_ATTEMPT: Final = 2**31 - 1


def message_problem(message: InboundMessage) -> str | None:
    """Why the broker cannot store ``message`` as sent, or None. The body, topic, queue and
    size are the broker's to check; these are the fields it would otherwise fail on."""
    if not 0 <= message.flags <= MAX_FLAGS:
        return f"flags {message.flags} outside 0..{MAX_FLAGS} (a 32-bit field)"
    born = timestamp_problem(message.born_timestamp, "born_timestamp")
    if born is not None:
        return born
    if "" in message.properties:
        return "a property name must not be empty"
    return None


def timestamp_problem(value: int, what: str) -> str | None:
    """Why ``value`` is no epoch time in milliseconds, or None."""
    if not 0 <= value <= MAX_TIMESTAMP_MS:
        return f"{what} {value} is not an epoch time in milliseconds"
    return None


def attempt_problem(record: w.AttemptRecord) -> str | None:
    """Why a reported delivery attempt cannot go into the attempt history, or None."""
    if not 0 <= record.attempt <= MAX_ATTEMPT:
        return f"attempt {record.attempt} outside 0..{MAX_ATTEMPT}"
    return timestamp_problem(record.delivered_at, "delivered_at") or timestamp_problem(
        record.finished_at, "finished_at"
    )
