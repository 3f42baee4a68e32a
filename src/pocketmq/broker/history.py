"""Attempt history: every delivery attempt of every message, with its outcome.

RocketMQ only counts attempts; when a message ends in the dead-letter queue nobody can say what
went wrong each time. pocketmq records one entry per attempt — message id, group, attempt number,
consumer, outcome, error text, when it was delivered and when it finished — as a record of the
internal topic ``%SYS%HISTORY`` keyed by message id, so ``pocketmq message history ID`` is one
index lookup, and the history ages out with the commit log.

Entries are buffered and written in batches (every housekeeping tick, or at 256 entries): the
history is for people and audits, so losing the last fraction of a second in a crash is accepted
(documented in docs/semantics.md).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable

import msgspec

from pocketmq import properties as props
from pocketmq.store import MessageStore, StoreMessage

__all__ = ["HISTORY_TOPIC", "Attempt", "AttemptHistory", "Outcome"]

HISTORY_TOPIC = "%SYS%HISTORY"
_FLUSH_AT = 256


class Outcome(enum.Enum):
    """How a delivery attempt ended, as the history and ``pocketmq message history`` show it."""

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    EXCEPTION = "EXCEPTION"
    TIMEOUT = "TIMEOUT"
    INVISIBLE_EXPIRED = "INVISIBLE_EXPIRED"
    DLQ = "DLQ"
    REDRIVEN = "REDRIVEN"


class Attempt(msgspec.Struct, frozen=True, array_like=True):
    """One history entry (module doc), encoded as an array; new fields go last with a default so
    records written before them still decode."""

    message_id: str
    group: str
    topic: str
    attempt: int
    consumer: str
    outcome: str
    error: str
    delivered_at: int  # epoch ms
    finished_at: int  # epoch ms
    message_group: str = ""  # FIFO group ("" for normal messages); last, so old records decode


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Attempt).decode


class AttemptHistory:
    """Records attempts into ``%SYS%HISTORY`` in batches, and answers queries by message id through
    the store's index."""

    def __init__(self, store: MessageStore, clock: Callable[[], float], enabled: bool = True):
        self._store = store
        self._clock = clock
        self.enabled = enabled
        self._buffer: list[StoreMessage] = []
        self.recorded = 0
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, group) -> attempts

    def record(
        self,
        *,
        message_id: str,
        group: str,
        topic: str,
        attempt: int,
        outcome: Outcome | str,
        consumer: str = "",
        error: str = "",
        delivered_at: float | None = None,
        finished_at: float | None = None,
        message_group: str = "",
    ) -> None:
        """Buffer one attempt; the buffer goes to the store every housekeeping tick or when it is
        full."""
        key = (outcome.value if isinstance(outcome, Outcome) else outcome, group)
        self.outcomes[key] += 1  # counted with the history off too: the metrics read these
        if not self.enabled or not message_id:
            return
        now = self._clock()
        entry = Attempt(
            message_id=message_id,
            group=group,
            topic=topic,
            attempt=attempt,
            consumer=consumer,
            outcome=outcome.value if isinstance(outcome, Outcome) else outcome,
            error=error[:2000],
            delivered_at=int((delivered_at if delivered_at is not None else now) * 1000),
            finished_at=int((finished_at if finished_at is not None else now) * 1000),
            message_group=message_group,
        )
        self._buffer.append(
            StoreMessage(
                topic=HISTORY_TOPIC,
                queue_id=0,
                body=_encode(entry),
                properties={props.KEYS: message_id},
            )
        )
        self.recorded += 1
        if len(self._buffer) >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Append the buffered attempts now (before a query, on shutdown), in one batch."""
        buffer, self._buffer = self._buffer, []
        if buffer:
            self._store.append(buffer)

    def query(self, message_id: str, limit: int = 512) -> list[Attempt]:
        """Every attempt recorded for ``message_id``, oldest first (the buffer is flushed first, so
        a query sees its own recent attempts)."""
        self.flush()
        # the index answers newest first: put the records back in written order, so attempts
        # recorded in the same millisecond (a last failure and its dead-lettering) keep it
        records = sorted(
            self._store.query_by_key(HISTORY_TOPIC, message_id, limit),
            key=lambda record: record.physical_offset,
        )
        found = [_decode(record.body) for record in records]
        return sorted(found, key=lambda a: (a.delivered_at, a.attempt, a.finished_at))
