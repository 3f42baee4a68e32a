"""The idempotent consumer: at-least-once delivery in, exactly-once business effects out.

The consumer side of docs/reliability.md ("Consumer: the idempotent wrapper"), as a wrapper
around a push-consumer listener. For every message of a batch:

1. **Log the receipt**, for the whole batch in one multi-row statement and its own short
   transaction: insert a ``RECEIVED`` row for (group, id) or add one to its ``receive_count``.
   The resend scheduler reads this as "it arrived". A row that is already ``CONSUMED`` means a
   duplicate of finished work: success, nothing else to do.
2. **Redis lease** (optional fast path): ``SET pocketmq:idem:<group>:<id> NX PX ttl``. If another
   worker holds it, the message is being handled right now (or its handler died recently); see
   *busy* below. If Redis itself fails, the wrapper carries on with the database alone.
3. **Business handler** ``await handler(message, tx)`` inside a transaction: it writes its
   effects through ``tx`` (``tx.connection`` / ``tx.session`` with the SQL backend).
4. **Decide and commit**, still in that transaction — the database check of the message log,
   made atomic: ``UPDATE message_log SET status='CONSUMED' WHERE ... AND status='RECEIVED'``
   and, where the stub table is shared (``confirm_stubs=True``), the stub to ``CONFIRMED``. One
   log row changed and the stub not confirmed before: commit effects, log row and stub together.
   Zero log rows: another worker won the race; roll back our effects and report success (a
   duplicate). A stub that was already ``CONFIRMED`` means the message was consumed long ago and
   its log row pruned since: roll back, mark the new log row ``CONSUMED``, report a duplicate.
5. **Failure** (exception from the handler or the database): everything rolls back, the lease is
   released so the redelivery is not mistaken for a busy duplicate, and the batch returns
   ``RECONSUME_LATER`` — unless the log row turns out to be ``CONSUMED`` by then (a racing worker
   committed first and our handler tripped over its rows, e.g. a unique key): that is a duplicate.

Why the check is a conditional update *after* the handler rather than a read before it: a read
would still need the update to close the race between two workers, and an update *before* the
handler would lock the log row for the handler's whole run — and every receipt of a duplicate
(step 1) writes that row, so each would queue behind the handler. Updating last holds the lock
only for the commit. Keeping racers from running the handler at all is the lease's job.

*Busy* (lease held by someone else): the classic design acknowledges such a duplicate as
consumed (docs/reliability.md "Deviations", 3). That
loses the message when the holder's attempt then fails and its own copy is not redelivered (a
handler that crashed and left the key until its TTL, while the broker redelivers sooner). The
wrapper therefore answers ``RECONSUME_LATER`` by default (``busy_status``): the duplicate comes
back later and finds the row ``CONSUMED``. Pass ``busy_status=ConsumeStatus.SUCCESS`` for the
classic behaviour.

Without a lease store (Redis-free mode) only the database decides (step 4); that is equally
correct, but concurrent duplicates may both run the handler before one of them rolls back.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic

from pocketmq.client import ConsumeStatus, MessageView
from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.backend import LeaseStore, ReliabilityBackend, StubConfirmation, TxT
from pocketmq.reliability.clock import Clock
from pocketmq.reliability.stub import LogEntry, LogStatus

__all__ = ["ConsumeOutcome", "ConsumerStatistics", "Handler", "IdempotentConsumer"]

_log = logging.getLogger("pocketmq.reliability.consumer")

#: ``async def handle(message, tx) -> None``; raise to fail (the transaction rolls back)
Handler = Callable[[MessageView, TxT], Awaitable[None]]


class ConsumeOutcome(enum.Enum):
    """What happened to one message; the listener turns it into SUCCESS or RECONSUME_LATER."""

    HANDLED = "HANDLED"  # the handler ran and its transaction committed
    DUPLICATE = "DUPLICATE"  # already consumed: acknowledged without running the handler
    BUSY = "BUSY"  # another worker holds the lease
    FAILED = "FAILED"  # handler or database failed: rolled back, to be redelivered


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerStatistics:
    """Counts since the wrapper was created, so that duplicates and lease trouble are visible
    in metrics instead of silent."""

    received: int
    handled: int
    duplicates: int
    busy: int
    failed: int
    lease_errors: int


class IdempotentConsumer(Generic[TxT]):
    """A push-consumer listener that runs ``handler`` at most once per (group, message id).

    Use it wherever the SDK takes a listener
    ``Callable[[list[MessageView]], Awaitable[ConsumeStatus]]``::

        async def handle(message: MessageView, tx: SqlTransaction) -> None:
            await tx.connection.execute(orders.insert().values(id=message.message_id, ...))

        listener = IdempotentConsumer(backend, handle, group="billing", leases=redis_leases)
        consumer = PushConsumer(..., listener=listener)

    Messages of a batch are handled in order; the first one that fails (or is busy, with the
    default ``busy_status``) ends the batch with ``RECONSUME_LATER``. The ones before it are
    committed, so the redelivered batch skips them as duplicates.
    """

    def __init__(
        self,
        backend: ReliabilityBackend[TxT],
        handler: Handler[TxT],
        *,
        group: str,
        leases: LeaseStore | None = None,
        lease_ttl: float = 60.0,
        confirm_stubs: bool = True,
        busy_status: ConsumeStatus = ConsumeStatus.RECONSUME_LATER,
        clock: Clock | None = None,
        batch_transactions: bool = True,
    ) -> None:
        if not group:
            raise InvalidArgumentError("group must not be empty")
        if lease_ttl <= 0:
            raise InvalidArgumentError("lease_ttl must be positive")
        if not callable(handler):
            raise InvalidArgumentError("handler must be an async callable")
        self.backend = backend
        self.handler = handler
        self.group = group
        self.leases = leases
        self.lease_ttl = lease_ttl
        self.confirm_stubs = confirm_stubs
        self.busy_status = busy_status
        self.clock = clock if clock is not None else backend.clock
        # one transaction per delivered batch, a savepoint per message, where the backend has
        # savepoints (SQL); otherwise, or when False, one transaction per message
        self.batch_transactions = batch_transactions
        self._counts = dict.fromkeys(
            ("received", "handled", "duplicates", "busy", "failed", "lease_errors"), 0
        )

    def __repr__(self) -> str:
        mode = "redis" if self.leases is not None else "database-only"
        return f"IdempotentConsumer(group={self.group!r}, {mode})"

    def statistics(self) -> ConsumerStatistics:
        """Counts since the wrapper was created, for metrics and for tests to check what
        happened.
        """
        return ConsumerStatistics(**self._counts)

    async def __call__(self, messages: Sequence[MessageView]) -> ConsumeStatus:
        """The listener: SUCCESS when every message is handled or a duplicate."""
        entries = await self._log_receipts(messages)
        if entries is None:
            return ConsumeStatus.RECONSUME_LATER
        if self.batch_transactions and len(messages) > 1:
            status = await self._batch_at_once(messages, entries)
            if status is None and self.batch_transactions:  # cleared: the backend has no savepoints
                status = await self._batch(messages, entries)
            if status is not None:
                return status
        settled: set[str] = set()
        for message, entry in zip(messages, entries, strict=True):
            if message.message_id in settled:  # the same message twice in one batch
                self._count(ConsumeOutcome.DUPLICATE)
                continue
            outcome = self._count(await self._consume(message, entry))
            if outcome in (ConsumeOutcome.HANDLED, ConsumeOutcome.DUPLICATE):
                settled.add(message.message_id)
            if outcome is ConsumeOutcome.FAILED:
                return ConsumeStatus.RECONSUME_LATER
            if outcome is ConsumeOutcome.BUSY and self.busy_status is ConsumeStatus.RECONSUME_LATER:
                return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.SUCCESS

    async def _batch_at_once(
        self, messages: Sequence[MessageView], entries: Sequence[LogEntry]
    ) -> ConsumeStatus | None:
        """The fast path for a batch where nothing goes wrong: leases in one round trip, every
        handler in one transaction without savepoints, then one claim and one stub confirmation
        for all. It commits only when every message was claimed and none was confirmed long
        ago; anything else — a busy lease, a handler that raises, a lost race, a failed commit —
        rolls it all back and returns None, and :meth:`_batch` does the batch message by message
        (savepoints), which sorts out who failed. A handler may therefore run twice for one
        delivery: its effects in the transaction still commit once (docs/reliability.md)."""
        fresh: list[MessageView] = []
        seen: set[str] = set()
        for message, entry in zip(messages, entries, strict=True):
            if message.message_id not in seen and entry.status is not LogStatus.CONSUMED:
                fresh.append(message)
            seen.add(message.message_id)
        ids = [m.message_id for m in fresh]
        tokens = await self._leases_for(ids)
        if tokens is None:
            return None
        try:
            async with self.backend.transaction() as tx:
                if not tx.supports_savepoints:  # no careful path to fall back on: per message
                    self.batch_transactions = False
                    raise _Fallback
                for message in fresh:
                    await self.handler(message, tx)
                now = self.clock.now()
                if ids and await tx.claim_logs(self.group, ids, now) != len(ids):
                    raise _Fallback  # another worker consumed one of them
                if ids and self.confirm_stubs and not await tx.confirm_stubs(ids, now):
                    raise _Fallback  # one was consumed long ago (its log row pruned)
        except Exception:  # _Fallback, a handler's exception, the database: the careful way
            for message_id, token in zip(ids, tokens, strict=True):
                await self._release(message_id, token)
            return None
        for _ in fresh:
            self._count(ConsumeOutcome.HANDLED)
        for _ in range(len(messages) - len(fresh)):
            self._count(ConsumeOutcome.DUPLICATE)
        return ConsumeStatus.SUCCESS

    async def _leases_for(self, message_ids: list[str]) -> list[str | None] | None:
        """Leases on every id in one round trip; None (nothing held) when one is busy."""
        if self.leases is None or not message_ids:
            return [None] * len(message_ids)
        try:
            tokens = await self.leases.acquire_many(self.group, message_ids, self.lease_ttl)
        except Exception:
            self._counts["lease_errors"] += 1
            _log.warning("lease store failed; deciding a batch by the database alone")
            return [None] * len(message_ids)
        if all(token is not None for token in tokens):
            return tokens
        for message_id, token in zip(message_ids, tokens, strict=True):
            await self._release(message_id, token)
        return None

    async def _batch(
        self, messages: Sequence[MessageView], entries: Sequence[LogEntry]
    ) -> ConsumeStatus:
        """The batch in one transaction, each message's handler and claim in a savepoint (the
        backend has them: :meth:`_batch_at_once` found out): one commit for the whole batch.
        Outcomes are counted once the commit succeeded; if it fails, nothing of the batch
        happened and it is redelivered."""
        outcomes: list[ConsumeOutcome] = []
        tokens: list[tuple[str, str | None]] = []
        status = ConsumeStatus.SUCCESS
        try:
            async with self.backend.transaction() as tx:
                settled: set[str] = set()
                for message, entry in zip(messages, entries, strict=True):
                    if message.message_id in settled or entry.status is LogStatus.CONSUMED:
                        outcomes.append(ConsumeOutcome.DUPLICATE)
                        continue
                    token, busy = await self._lease(message.message_id)
                    if busy:
                        outcomes.append(ConsumeOutcome.BUSY)
                        if self.busy_status is ConsumeStatus.RECONSUME_LATER:
                            status = ConsumeStatus.RECONSUME_LATER
                            break
                        continue
                    tokens.append((message.message_id, token))
                    outcome = await self._in_savepoint(tx, message)
                    outcomes.append(outcome)
                    if outcome is ConsumeOutcome.FAILED:
                        # its redelivery must not find the lease held and be taken for busy
                        await self._release(message.message_id, token)
                        status = ConsumeStatus.RECONSUME_LATER
                        break
                    settled.add(message.message_id)
        except Exception:
            _log.exception(
                "committing a batch of %d for group %s failed", len(messages), self.group
            )
            for message_id, token in tokens:
                await self._release(message_id, token)
            self._count(ConsumeOutcome.FAILED)
            return ConsumeStatus.RECONSUME_LATER
        for outcome in outcomes:
            self._count(outcome)
        return status

    async def _lease(self, message_id: str) -> tuple[str | None, bool]:
        """(token, busy): the Redis lease on the message, when there is a lease store."""
        if self.leases is None:
            return None, False
        try:
            token = await self.leases.acquire(self.group, message_id, self.lease_ttl)
        except Exception:
            self._counts["lease_errors"] += 1
            _log.warning("lease store failed; deciding %s by the database alone", message_id)
            return None, False
        return token, token is None

    async def _handle_and_claim(self, tx: TxT, message: MessageView) -> None:
        """Steps 3 and 4 for one message in ``tx``: the handler, then the log row's claim and
        the stub's confirmation; :class:`_LostRace` when another worker (or an earlier one,
        long ago) consumed it."""
        await self.handler(message, tx)
        now = self.clock.now()
        if not await tx.claim_log(self.group, message.message_id, now):
            raise _LostRace(record=False)
        if self.confirm_stubs:
            confirmation = await tx.confirm_stub(message.message_id, now)
            if confirmation is StubConfirmation.ALREADY_CONFIRMED:
                raise _LostRace(record=True)

    async def _in_savepoint(self, tx: TxT, message: MessageView) -> ConsumeOutcome:
        """One message of a batch: handler, claim and stub confirmation in a savepoint."""
        group, message_id = self.group, message.message_id
        try:
            async with tx.savepoint():
                await self._handle_and_claim(tx, message)
        except _LostRace as race:
            if race.record:  # done long ago, its log row pruned since: mark this one done too
                await tx.claim_log(group, message_id, self.clock.now())
            return ConsumeOutcome.DUPLICATE
        except Exception as exc:
            if tx.lost_whole(exc):
                raise  # the whole batch is gone: it must not commit (and is redelivered)
            return await self._failed_or_duplicate(message_id)
        return ConsumeOutcome.HANDLED

    async def consume(self, message: MessageView) -> ConsumeOutcome:
        """Run the whole flow for one message and say how it ended."""
        entries = await self._log_receipts([message])
        if entries is None:
            return self._count(ConsumeOutcome.FAILED)
        return self._count(await self._consume(message, entries[0]))

    async def _log_receipts(self, messages: Sequence[MessageView]) -> list[LogEntry] | None:
        self._counts["received"] += len(messages)
        try:
            return await self.backend.log_receipts(self.group, messages, self.clock.now())
        except Exception:
            _log.exception("could not log the receipt of %d messages", len(messages))
            self._counts["failed"] += 1
            return None

    def _count(self, outcome: ConsumeOutcome) -> ConsumeOutcome:
        key = {
            ConsumeOutcome.HANDLED: "handled",
            ConsumeOutcome.DUPLICATE: "duplicates",
            ConsumeOutcome.BUSY: "busy",
            ConsumeOutcome.FAILED: "failed",
        }[outcome]
        self._counts[key] += 1
        return outcome

    async def _consume(self, message: MessageView, entry: LogEntry) -> ConsumeOutcome:
        group, message_id = self.group, message.message_id
        if entry.status is LogStatus.CONSUMED:
            return ConsumeOutcome.DUPLICATE

        token: str | None = None
        if self.leases is not None:
            try:
                token = await self.leases.acquire(group, message_id, self.lease_ttl)
            except Exception:
                self._counts["lease_errors"] += 1
                _log.warning("lease store failed; deciding %s by the database alone", message_id)
            else:
                if token is None:
                    return ConsumeOutcome.BUSY

        try:
            return await self._run(message)
        except Exception:
            await self._release(message_id, token)
            return await self._failed_or_duplicate(message_id)

    async def _run(self, message: MessageView) -> ConsumeOutcome:
        group, message_id = self.group, message.message_id
        try:
            async with self.backend.transaction() as tx:
                await self._handle_and_claim(tx, message)
        except _LostRace as race:
            if race.record:  # done long ago, its log row pruned since: mark this one done too
                async with self.backend.transaction() as tx:
                    await tx.claim_log(group, message_id, self.clock.now())
            return ConsumeOutcome.DUPLICATE
        return ConsumeOutcome.HANDLED

    async def _failed_or_duplicate(self, message_id: str) -> ConsumeOutcome:
        """After a rolled-back attempt: a duplicate when a racing worker committed the message
        first (our handler may have tripped over its rows, e.g. a unique key), else a failure."""
        try:
            after = await self.backend.get_log(self.group, message_id)
        except Exception:
            after = None
        if after is not None and after.status is LogStatus.CONSUMED:
            return ConsumeOutcome.DUPLICATE
        _log.exception("handling %s for group %s failed; rolled back", message_id, self.group)
        return ConsumeOutcome.FAILED

    async def _release(self, message_id: str, token: str | None) -> None:
        if self.leases is None or token is None:
            return
        try:
            await self.leases.release(self.group, message_id, token)
        except Exception:
            self._counts["lease_errors"] += 1
            _log.warning("could not release the lease on %s; it expires by itself", message_id)


class _Fallback(Exception):
    """The fast path of a batch cannot commit: roll it back, go message by message."""


class _LostRace(Exception):
    """Another worker consumed the message first: roll back this attempt's effects."""

    def __init__(self, *, record: bool) -> None:
        super().__init__()
        self.record = record
