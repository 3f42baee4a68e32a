"""Attempt history: every delivery attempt of every message, with its outcome.

RocketMQ only counts attempts; when a message ends in the dead-letter queue nobody can say what
went wrong each time. pocketmq records one entry per attempt — message id, group, attempt number,
consumer, outcome, error text, when it was delivered and when it finished — as a record of the
internal topic ``%SYS%HISTORY`` keyed by message id, so ``pocketmq message history ID`` is one
index lookup, and the history ages out with the commit log.

Entries are buffered and written in batches (every housekeeping tick, or at 256 entries), up to
:data:`_PACK` attempts to a store record indexed under each of their message ids: the store's
cost is per record. The history is for people and audits, so losing the last fraction of a
second in a crash is accepted (documented in docs/semantics.md).

Successes arrive in bulk (push consumers report them about every 256 messages or once a second):
they wait in a bounded intake that a background task records :data:`_SLICE` at a time, yielding
to the event loop between slices, each slice appended as it is recorded, so a report of
thousands of entries never holds deliveries up for more than a fraction of a millisecond. When
the intake is full, further reports are counted (:attr:`AttemptHistory.dropped`, a metric) but
not stored: the history degrades, deliveries do not wait (docs/semantics.md, "Attempt history").
"""

from __future__ import annotations

import asyncio
import collections
import enum
import operator
from collections import Counter
from collections.abc import Callable, Sequence

import msgspec

from pocketmq import properties as props
from pocketmq.model.attempts import Attempt
from pocketmq.names import HISTORY_TOPIC
from pocketmq.store import MessageStore, StoreMessage

__all__ = ["HISTORY_TOPIC", "AttemptHistory", "Outcome", "decode_attempts"]

_FLUSH_AT = 256
_SLICE = 32  # reported entries recorded per event-loop turn
_ERROR_LIMIT = 2000  # characters of an attempt's error text kept
_PACK = 32  # attempts per record: one store record, indexed under each attempt's message id
_INTAKE_LIMIT = 200_000  # reported entries waiting; beyond it they are counted, not stored


class Outcome(enum.Enum):
    """How a delivery attempt ended, as the history and ``pocketmq message history`` show it."""

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    EXCEPTION = "EXCEPTION"
    TIMEOUT = "TIMEOUT"
    INVISIBLE_EXPIRED = "INVISIBLE_EXPIRED"
    DLQ = "DLQ"
    REDRIVEN = "REDRIVEN"


_encode = msgspec.msgpack.Encoder().encode
_decode_one = msgspec.msgpack.Decoder(Attempt).decode
_decode_packed = msgspec.msgpack.Decoder(list[Attempt]).decode
_message_id_of = operator.attrgetter("message_id")


def decode_attempts(body: bytes) -> list[Attempt]:
    """The attempts one ``%SYS%HISTORY`` record holds: a packed record (an array of up to
    :data:`_PACK` attempts, written since 2026-11-25) or an older one-attempt record
    (docs/storage-format.md, "The attempt history")."""
    try:
        return _decode_packed(body)
    except msgspec.ValidationError:
        return [_decode_one(body)]


class AttemptHistory:
    """Records attempts into ``%SYS%HISTORY`` in batches, and answers queries by message id through
    the store's index."""

    def __init__(self, store: MessageStore, clock: Callable[[], float], enabled: bool = True):
        self._store = store
        self._clock = clock
        self.enabled = enabled
        self._buffer: list[Attempt] = []
        self.recorded = 0
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, group) -> attempts
        # reports waiting, as they came: (group, consumer, attempts); the first of them is
        # recorded from ``_taken`` on, and ``_waiting`` attempts are left in all
        self._intake: collections.deque[tuple[str, str, Sequence[Attempt]]] = collections.deque()
        self._taken = 0
        self._waiting = 0
        self._arrived = asyncio.Event()
        self.dropped = 0  # reported entries not stored because the intake was full

    def report(self, group: str, consumer: str, attempts: Sequence[Attempt]) -> None:
        """Queue attempts a consumer reported (module doc): :meth:`drain_forever` records them
        a slice at a time; beyond the intake's bound they are only counted."""
        room = max(_INTAKE_LIMIT - self._waiting, 0) if self.enabled else 0
        kept, counted_only = attempts[:room], attempts[room:]
        for attempt in counted_only:  # kept ones are counted when recorded
            self.outcomes[(attempt.outcome, group)] += 1
        if self.enabled:
            self.dropped += len(counted_only)
        if kept:
            self._intake.append((group, consumer, kept))  # the report as it came, not per entry
            self._waiting += len(kept)
            self._arrived.set()

    async def drain_forever(self) -> None:
        """Record the intake :data:`_SLICE` entries per event-loop turn (broker task), each
        slice appended in the turn that records it (one record of :data:`_PACK`)."""
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._intake:
                self._record_reported(_SLICE)
                self._write()
                await asyncio.sleep(0)

    def _record_reported(self, limit: int | None = None) -> None:
        """Move up to ``limit`` reported attempts (all: None) from the intake to the write
        buffer, a report's slice at a time."""
        intake = self._intake
        budget = self._waiting if limit is None else min(limit, self._waiting)
        self._waiting -= budget
        while budget:
            group, consumer, attempts = intake[0]
            start = self._taken
            end = min(len(attempts), start + budget)
            if end == len(attempts):
                intake.popleft()
                self._taken = 0
            else:
                self._taken = end
            budget -= end - start
            self._take(group, consumer, attempts[start:end])
        if len(self._buffer) >= _FLUSH_AT:
            self._write()

    def _take(self, group: str, consumer: str, attempts: Sequence[Attempt]) -> None:
        """Count ``attempts`` and buffer them: as they are, unless the group or reporting
        consumer differs or the error text is too long; an attempt without a message id is only
        counted. Checked for the whole slice first: a consumer's report is all alike, and a
        loop per entry was a tenth of the broker's time per consumed message (docs/benchmarks.md,
        "Broker consume path (issue 32, third slice)")."""
        outcomes = self.outcomes
        # the outcome is checked in the same pass: a set of the outcomes first cost a quarter
        # of this method (docs/benchmarks.md, "Broker consume path, compiled entries' loop
        # (issue 32)"); a slice not all alike is rebuilt as reported (an attempt already as
        # reported is rebuilt equal)
        kind = attempts[0].outcome if attempts else ""
        alike = [
            attempt
            for attempt in attempts
            if attempt.message_id
            and attempt.outcome == kind
            and attempt.group == group
            and (not consumer or attempt.consumer == consumer)
            and len(attempt.error) <= _ERROR_LIMIT
        ]
        if alike and len(alike) == len(attempts):  # a consumer's report: all successes
            outcomes[(kind, group)] += len(attempts)
        else:
            for attempt in attempts:
                outcomes[(attempt.outcome, group)] += 1
        if not self.enabled:  # off since (a demoted master)
            return
        if len(alike) < len(attempts):
            alike = [
                msgspec.structs.replace(
                    attempt,
                    group=group,
                    consumer=consumer or attempt.consumer,
                    error=attempt.error[:_ERROR_LIMIT],
                )
                for attempt in attempts
                if attempt.message_id
            ]
        self._buffer += alike
        self.recorded += len(alike)

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
            error=error[:_ERROR_LIMIT],
            delivered_at=int((delivered_at if delivered_at is not None else now) * 1000),
            finished_at=int((finished_at if finished_at is not None else now) * 1000),
            message_group=message_group,
        )
        self._buffer.append(entry)
        self.recorded += 1
        if len(self._buffer) >= _FLUSH_AT:
            self._write()

    def flush(self) -> None:
        """Record the whole intake and append everything buffered now (before a query, on
        shutdown)."""
        self._record_reported()
        self._write()

    def tick(self) -> None:
        """Append the attempts recorded since the last write (housekeeping; the intake is left
        to :meth:`drain_forever`, so a tick stays short)."""
        self._write()

    def _write(self) -> None:
        """Append the buffered attempts, :data:`_PACK` to a record: the store's cost is per
        record, and a record is found under every message id it holds (``KEYS``)."""
        buffer, self._buffer = self._buffer, []
        if buffer:
            self._store.append(
                [
                    StoreMessage(
                        topic=HISTORY_TOPIC,
                        queue_id=0,
                        body=_encode(chunk),
                        properties={
                            props.KEYS: " ".join(dict.fromkeys(map(_message_id_of, chunk)))
                        },
                    )
                    for chunk in (buffer[i : i + _PACK] for i in range(0, len(buffer), _PACK))
                ]
            )

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
        found = [
            attempt
            for record in records
            for attempt in decode_attempts(record.body)
            if attempt.message_id == message_id
        ]
        return sorted(found, key=lambda a: (a.delivered_at, a.attempt, a.finished_at))
