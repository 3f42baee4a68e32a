"""The transaction model: states, what the broker reports, and the pending-transaction record.

Constants name the internal topics (the half messages, and the op log of outcomes) and the record
flag bits that mark a transactional record in the store (docs/storage-format.md §1).
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketmq import properties as props
from pocketmq.model.messages import Delivered
from pocketmq.names import HALF_TOPIC, OP_TOPIC
from pocketmq.store import StoredMessage

__all__ = [
    "HALF_TOPIC",
    "INTERNAL_PROPERTIES",
    "OP_TOPIC",
    "TX_COMMIT",
    "TX_MASK",
    "TX_PREPARED",
    "TX_ROLLBACK",
    "Pending",
    "check_view",
]


# record flags, bits 0-1 (docs/storage-format.md)
TX_MASK = 0b11
TX_PREPARED = 1
TX_COMMIT = 2
TX_ROLLBACK = 3

INTERNAL_PROPERTIES = frozenset(
    {props.REAL_TOPIC, props.REAL_QUEUE_ID, props.TRANSACTION_PREPARED, props.CHECK_TIMES}
)
"""Properties of a half message only the broker uses (hidden from checkers and copies)."""


@dataclass(slots=True)
class Pending:
    """A transaction waiting for its outcome: where its half message is and when to check it."""

    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    half_offset: int
    half_queue_offset: int
    prepared_at: float
    next_check_at: float
    checks: int = 0
    last_check_at: float = 0.0
    last_checked_by: str = ""
    waiting_since: float = 0.0  # no live producer of the group since then (0: one was there)


def check_view(half: StoredMessage, entry: Pending, number: int) -> Delivered:
    """The half message as the producer's checker sees it: its real topic and queue."""
    properties = {k: v for k, v in half.properties.items() if k not in INTERNAL_PROPERTIES}
    properties[props.CHECK_TIMES] = str(number)
    return Delivered(
        topic=entry.topic,
        queue_id=entry.queue_id,
        queue_offset=-1,
        body=half.body,
        properties=properties,
        born_timestamp=half.born_timestamp,
        store_timestamp=half.store_timestamp,
        physical_offset=half.physical_offset,
        delivery_attempt=number,
        born_host=half.born_host,
    )
