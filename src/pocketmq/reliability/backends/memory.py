"""The in-memory backend: the contract's reference implementation and a test double.

Why it models row locks: the SQL backends serialise two consumers of the same message on the
log row's lock (the second waits, then sees CONSUMED or RECEIVED depending on how the first
ended). A memory backend that skipped that would pass tests the databases fail, so here a
transaction that claims a row holds it until commit or rollback and other claimers wait.
Staged changes are applied field by field at commit, so an unrelated update made meanwhile (a
resend bumping ``send_count``) is not overwritten — again like an SQL ``UPDATE``.

Business effects have nowhere to go in memory; handlers observe them with
:meth:`~pocketmq.reliability.backend.Transaction.on_commit`.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Final

from pocketmq.client import MessageView, SendResult
from pocketmq.reliability.backend import (
    LeaseStore,
    ReliabilityBackend,
    StubConfirmation,
    Transaction,
)
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock
from pocketmq.reliability.errors import DuplicateMessageIdError, StubNotFoundError, StubStateError
from pocketmq.reliability.stub import (
    MANUAL_PREFIX,
    PENDING_STATUSES,
    LogEntry,
    LogStatus,
    MessageStub,
    StubStatus,
)

__all__ = ["MemoryBackend", "MemoryLeaseStore", "MemoryTransaction"]

_LockKey = tuple[str, ...]


class _State:
    def __init__(self) -> None:
        self.stubs: dict[str, MessageStub] = {}
        self.log: dict[tuple[str, str], LogEntry] = {}
        self.held: dict[_LockKey, int] = {}
        self.cond = asyncio.Condition()


class MemoryTransaction(Transaction):
    """A transaction over :class:`MemoryBackend`'s dictionaries, with row locks held to the end
    (see the module docstring for why a test double models them)."""

    _ids: Final = itertools.count(1)

    def __init__(self, state: _State, clock: Clock) -> None:
        super().__init__(clock)
        self._state = state
        self._id = next(self._ids)
        self._locked: list[_LockKey] = []
        self._ops: list[Callable[[], None]] = []

    async def _lock(self, key: _LockKey) -> None:
        if self._state.held.get(key) == self._id:
            return
        async with self._state.cond:
            await self._state.cond.wait_for(lambda: key not in self._state.held)
            self._state.held[key] = self._id
        self._locked.append(key)

    async def _unlock_all(self) -> None:
        if not self._locked:
            return
        async with self._state.cond:
            for key in self._locked:
                self._state.held.pop(key, None)
            self._locked.clear()
            self._state.cond.notify_all()

    async def claim_log(self, group: str, message_id: str, now: datetime) -> bool:
        """Lock the log row until the end of the transaction, as a SQL row lock would, and stage
        RECEIVED -> CONSUMED for the commit.
        """
        await self._lock(("log", group, message_id))
        key = (group, message_id)
        entry = self._state.log.get(key)
        if entry is None or entry.status is not LogStatus.RECEIVED:
            return False

        def apply() -> None:
            current = self._state.log.get(key)
            if current is not None:
                self._state.log[key] = replace(current, status=LogStatus.CONSUMED, consumed_at=now)

        self._ops.append(apply)
        return True

    async def confirm_stub(self, message_id: str, now: datetime) -> StubConfirmation:
        """Lock the stub and stage CONFIRMED, applied field by field at commit (a concurrent
        resend's send count survives).
        """
        await self._lock(("stub", message_id))
        stub = self._state.stubs.get(message_id)
        if stub is None:
            return StubConfirmation.NO_STUB
        if stub.status is StubStatus.CONFIRMED:
            return StubConfirmation.ALREADY_CONFIRMED

        def apply() -> None:
            current = self._state.stubs.get(message_id)
            if current is not None:
                self._state.stubs[message_id] = replace(
                    current, status=StubStatus.CONFIRMED, updated_at=now
                )

        self._ops.append(apply)
        return StubConfirmation.CONFIRMED

    async def stub_status(self, message_id: str) -> StubStatus | None:
        """The committed status: a dictionary holds no uncommitted state to show."""
        stub = self._state.stubs.get(message_id)
        return None if stub is None else stub.status

    def _commit(self) -> None:
        new_ids = [stub.message_id for stub in self.staged_stubs]
        clashes = {i for i in new_ids if i in self._state.stubs}
        clashes |= {i for i in new_ids if new_ids.count(i) > 1}
        if clashes:
            raise DuplicateMessageIdError(tuple(sorted(clashes)))
        for stub in self.staged_stubs:
            self._state.stubs[stub.message_id] = stub
        for op in self._ops:
            op()


class MemoryBackend(ReliabilityBackend[MemoryTransaction]):
    """Stubs and log rows in dictionaries; lost when the process ends.

    The contract's reference implementation: applications unit-test their outbox and consumer
    code against it without a database, and the contract suite holds the SQL backend to it.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock=clock)
        self._state = _State()

    def __repr__(self) -> str:
        return f"MemoryBackend(stubs={len(self._state.stubs)}, log={len(self._state.log)})"

    def load_stubs(self, stubs: Iterable[MessageStub]) -> None:
        """Put stubs in as they are, replacing any with the same id.

        Why: a test of code that *reads* stubs (a resend job, an operator tool) needs rows in
        every state — sent three times, UNKNOWN, alerted — and reaching each through the
        outbox and fake sends would test the outbox instead. SQL tests insert rows; this is the
        memory backend's equivalent.
        """
        for stub in stubs:
            self._state.stubs[stub.message_id] = stub

    async def create_schema(self) -> None:
        """Nothing to create: the dictionaries exist from the start."""
        return None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        """A transaction whose staged changes apply at commit and vanish on an exception, locks
        released either way.
        """
        tx = MemoryTransaction(self._state, self.clock)
        try:
            yield tx
            tx._commit()
        finally:
            await tx._unlock_all()
        self._committed(tx)

    # -- stubs -------------------------------------------------------------------------------

    def _require(self, message_id: str) -> MessageStub:
        stub = self._state.stubs.get(message_id)
        if stub is None:
            raise StubNotFoundError(message_id)
        return stub

    async def get_stub(self, message_id: str) -> MessageStub | None:
        """The stub with this id, or None."""
        return self._state.stubs.get(message_id)

    async def stub_status(self, message_id: str) -> StubStatus | None:
        """The stub's status, or None (no body to skip loading in memory)."""
        stub = self._state.stubs.get(message_id)
        return None if stub is None else stub.status

    async def list_stubs(
        self,
        *,
        status: StubStatus | None = None,
        alerted: bool | None = None,
        limit: int = 100,
    ) -> list[MessageStub]:
        """The contract's listing in plain Python: by creation time, then id."""
        found = [
            s
            for s in self._state.stubs.values()
            if (status is None or s.status is status) and (alerted is None or s.alerted == alerted)
        ]
        found.sort(key=lambda s: (s.created_at, s.message_id))
        return found[:limit]

    async def stubs_for_relay(self, now: datetime, *, limit: int) -> list[MessageStub]:
        """Never-sent due stubs in plain Python: the reference the SQL statement is tested
        against.
        """
        found = [
            s
            for s in self._state.stubs.values()
            if s.status is StubStatus.UNCONFIRMED and s.send_count == 0 and s.next_resend_at <= now
        ]
        found.sort(key=lambda s: (s.created_at, s.message_id))
        return found[:limit]

    async def stubs_for_resend(
        self,
        now: datetime,
        *,
        max_sends: int,
        group: str | None,
        offset_wait: float | None,
        limit: int,
    ) -> list[MessageStub]:
        """The resend rule in plain Python, one stub at a time: the reference the SQL statement is
        tested against.
        """
        logged_ids: set[str] = set()
        max_offset: dict[tuple[str, str, int], int] = {}
        for (g, message_id), entry in self._state.log.items():
            if group is not None and g != group:
                continue
            logged_ids.add(message_id)
            queue = (entry.topic, entry.broker_name, entry.queue_id)
            max_offset[queue] = max(max_offset.get(queue, entry.queue_offset), entry.queue_offset)
        stale_before = None if offset_wait is None else now - timedelta(seconds=offset_wait)

        def eligible(s: MessageStub) -> bool:
            if s.status not in PENDING_STATUSES or s.send_count >= max_sends:
                return False
            if s.next_resend_at > now or s.message_id in logged_ids:
                return False
            if s.queue_offset is None:
                return True
            passed = max_offset.get((s.topic, s.broker_name or "", s.queue_id or 0))
            if passed is not None and s.queue_offset < passed:
                return True
            return stale_before is not None and s.next_resend_at <= stale_before

        found = [s for s in self._state.stubs.values() if eligible(s)]
        found.sort(key=lambda s: (s.next_resend_at, s.message_id))
        return found[:limit]

    async def claim_stub(self, stub: MessageStub, *, until: datetime, now: datetime) -> bool:
        """Compare-and-set on the entry; one coroutine runs at a time, so the check and the update
        cannot interleave.
        """
        current = self._state.stubs.get(stub.message_id)
        if (
            current is None
            or current.status not in PENDING_STATUSES
            or current.send_count != stub.send_count
            or current.next_resend_at != stub.next_resend_at
        ):
            return False
        self._state.stubs[stub.message_id] = replace(current, next_resend_at=until, updated_at=now)
        return True

    async def record_sent(
        self, message_id: str, result: SendResult, *, next_resend_at: datetime, now: datetime
    ) -> None:
        """Count the send and keep where it went; UNKNOWN becomes UNCONFIRMED, a settled status
        stays.
        """
        current = self._require(message_id)
        status = StubStatus.UNCONFIRMED if current.status is StubStatus.UNKNOWN else current.status
        self._state.stubs[message_id] = replace(
            current,
            status=status,
            send_count=current.send_count + 1,
            broker_name=result.broker_name,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            next_resend_at=next_resend_at,
            updated_at=now,
            last_error=None,
        )

    async def record_send_failed(
        self,
        message_id: str,
        *,
        outcome_unknown: bool,
        error: str,
        next_resend_at: datetime,
        now: datetime,
    ) -> None:
        """Count the failed send too, so a hopeless stub reaches manual handling; a possibly
        stored one becomes UNKNOWN.
        """
        current = self._require(message_id)
        status = current.status
        if outcome_unknown and status in PENDING_STATUSES:
            status = StubStatus.UNKNOWN
        self._state.stubs[message_id] = replace(
            current,
            status=status,
            send_count=current.send_count + 1,
            next_resend_at=next_resend_at,
            updated_at=now,
            last_error=error,
        )

    async def stubs_exhausted(
        self, now: datetime, *, max_sends: int, limit: int
    ) -> list[MessageStub]:
        """Pending stubs out of sends and past their last resend time, not yet handed to a human."""
        found = [
            s
            for s in self._state.stubs.values()
            if s.status in PENDING_STATUSES
            and s.send_count >= max_sends
            and s.next_resend_at <= now
            and not s.alerted
        ]
        found.sort(key=lambda s: (s.next_resend_at, s.message_id))
        return found[:limit]

    async def mark_manual(self, message_id: str, note: str, now: datetime) -> bool:
        """Compare-and-set the ``manual:`` marker, so that several schedulers alert once."""
        current = self._state.stubs.get(message_id)
        if current is None or current.alerted:
            return False
        self._state.stubs[message_id] = replace(
            current, last_error=f"{MANUAL_PREFIX} {note}", updated_at=now
        )
        return True

    async def clear_manual(self, message_id: str, restore: str | None, now: datetime) -> None:
        """Take the marker back when every alert hook failed, so the next run tries again."""
        current = self._state.stubs.get(message_id)
        if current is not None and current.alerted:
            self._state.stubs[message_id] = replace(current, last_error=restore, updated_at=now)

    async def void_stub(self, message_id: str, now: datetime) -> MessageStub:
        """Operator: stop resending (refused for a CONFIRMED stub, which is done)."""
        current = self._require(message_id)
        if current.status is StubStatus.CONFIRMED:
            raise StubStateError(message_id, current.status.value, "void")
        updated = replace(current, status=StubStatus.VOID, updated_at=now)
        self._state.stubs[message_id] = updated
        return updated

    async def reschedule_stub(self, message_id: str, now: datetime) -> MessageStub:
        """Operator: due now with a fresh budget of sends (refused for a CONFIRMED stub)."""
        current = self._require(message_id)
        if current.status is StubStatus.CONFIRMED:
            raise StubStateError(message_id, current.status.value, "resend")
        updated = replace(
            current,
            status=StubStatus.UNCONFIRMED,
            send_count=0,
            broker_name=None,
            queue_id=None,
            queue_offset=None,
            next_resend_at=now,
            updated_at=now,
            last_error=None,
        )
        self._state.stubs[message_id] = updated
        return updated

    # -- message log -------------------------------------------------------------------------

    async def log_receipt(self, group: str, message: MessageView, now: datetime) -> LogEntry:
        """Insert a RECEIVED entry or count one more receipt on the existing one."""
        key = (group, message.message_id)
        current = self._state.log.get(key)
        if current is None:
            entry = LogEntry(
                consumer_group=group,
                message_id=message.message_id,
                topic=message.topic,
                broker_name=message.broker_name,
                queue_id=message.queue_id,
                queue_offset=message.queue_offset,
                status=LogStatus.RECEIVED,
                receive_count=1,
                created_at=now,
            )
        else:
            entry = replace(current, receive_count=current.receive_count + 1)
        self._state.log[key] = entry
        return entry

    async def get_log(self, group: str, message_id: str) -> LogEntry | None:
        """The entry of (group, message id), or None."""
        return self._state.log.get((group, message_id))

    async def list_log(self, *, group: str | None = None, limit: int = 100) -> list[LogEntry]:
        """Entries by first receipt, then group and id."""
        found = [e for e in self._state.log.values() if group is None or e.consumer_group == group]
        found.sort(key=lambda e: (e.created_at, e.consumer_group, e.message_id))
        return found[:limit]

    def _stub_pending(self, message_id: str) -> bool:
        # While a stub is pending, its log row is what keeps the resend rule from sending it again.
        stub = self._state.stubs.get(message_id)
        return stub is not None and stub.status in PENDING_STATUSES

    async def prune_log(self, *, older_than: datetime, group: str | None = None) -> int:
        """Delete old CONSUMED entries, keeping each queue's highest and those of pending stubs (the
        resend rule needs them).
        """
        keep: dict[tuple[str, str, str, int], LogEntry] = {}
        for entry in self._state.log.values():
            queue = (entry.consumer_group, entry.topic, entry.broker_name, entry.queue_id)
            best = keep.get(queue)
            if best is None or entry.queue_offset > best.queue_offset:
                keep[queue] = entry
        kept = {(e.consumer_group, e.message_id) for e in keep.values()}
        doomed = [
            key
            for key, e in self._state.log.items()
            if (group is None or e.consumer_group == group)
            and e.status is LogStatus.CONSUMED
            and e.consumed_at is not None
            and e.consumed_at < older_than
            and key not in kept
            and not self._stub_pending(e.message_id)
        ]
        for key in doomed:
            del self._state.log[key]
        return len(doomed)


class MemoryLeaseStore(LeaseStore):
    """Leases in a dictionary, expiring by the given clock (a Redis stand-in for tests)."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._leases: dict[tuple[str, str], tuple[str, datetime]] = {}

    async def acquire(self, group: str, message_id: str, ttl: float) -> str | None:
        """Take the lease unless someone holds an unexpired one."""
        now = self._clock.now()
        key = (group, message_id)
        held = self._leases.get(key)
        if held is not None and held[1] > now:
            return None
        token = secrets.token_hex(8)
        self._leases[key] = (token, now + timedelta(seconds=ttl))
        return token

    async def release(self, group: str, message_id: str, token: str) -> bool:
        """Give the lease back only with the token that took it, as Redis's compare-and-delete
        does.
        """
        key = (group, message_id)
        held = self._leases.get(key)
        if held is None or held[0] != token:
            return False
        del self._leases[key]
        return True

    def expire_all(self) -> None:
        """Forget every lease (simulates Redis losing its keys)."""
        self._leases.clear()
