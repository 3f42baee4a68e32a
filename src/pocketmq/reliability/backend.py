"""The storage contract every reliability backend implements (docs/reliability.md "Backends").

Why an ABC rather than SQL everywhere: the in-memory backend lets applications unit-test their
outbox and consumer code without a database, and one contract test suite
(``tests/reliability/test_backend_contract.py``) pins down the behaviour every implementation
must share — SQLite, PostgreSQL, MariaDB and memory alike.

Two kinds of operation:

* :class:`Transaction` — a unit of work the *application* writes into. On the producer side it
  stages outbox stubs beside the business change (:meth:`Transaction.add_message`); on the consumer
  side the idempotent wrapper claims the log row and confirms the stub in it, and the business
  handler writes its effects into the same transaction. Everything commits or nothing does.
* single-statement operations on :class:`ReliabilityBackend` for the relay, the resend scheduler,
  the receipt log and the operator commands. Each is atomic on its own; the ones that hand out work
  (:meth:`ReliabilityBackend.claim_stub`, :meth:`ReliabilityBackend.mark_manual`) are
  compare-and-set, so several relays or schedulers may run against one database safely.

:class:`LeaseStore` is the contract of the optional fast path in front of the database (Redis
``SET NX PX``): it only avoids duplicate work, it never decides correctness.
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Generic, TypeVar

from pocketmq.client import Message, MessageView, SendResult
from pocketmq.reliability._resource import AsyncResource
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock
from pocketmq.reliability.stub import LogEntry, MessageStub, StubStatus, stub_for

__all__ = [
    "CommitListener",
    "LeaseStore",
    "ReliabilityBackend",
    "StubConfirmation",
    "Transaction",
    "TxT",
]

_log = logging.getLogger("pocketmq.reliability")

#: called after a transaction that staged stubs has committed, with the staged messages
CommitListener = Callable[[Sequence[Message]], None]


class StubConfirmation(enum.Enum):
    """What :meth:`Transaction.confirm_stub` found: the consumer treats an already confirmed stub
    as a duplicate whose log row was pruned, so it must tell that from "no stub"."""

    CONFIRMED = "CONFIRMED"  # this transaction moved the stub to CONFIRMED
    ALREADY_CONFIRMED = "ALREADY_CONFIRMED"
    NO_STUB = "NO_STUB"  # the message was not sent through this outbox


class Transaction(ABC):
    """One database transaction shared by the toolkit and the application.

    Backends add their own handle for business writes (``SqlTransaction.connection`` and
    ``.session``); :meth:`on_commit` works everywhere and is how in-memory tests observe effects.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._staged: list[tuple[Message, MessageStub]] = []
        self._callbacks: list[Callable[[], object]] = []

    def add_message(self, message: Message) -> Message:
        """Stage ``message`` in the outbox; its stub is inserted when this transaction commits.

        Returns the message with its stable ``message_id`` (assigned here unless already set).
        Nothing is sent before the commit: the relay sends it afterwards.
        """
        message, stub = stub_for(message, self._clock.now())
        self._staged.append((message, stub))
        return message

    @property
    def staged_messages(self) -> tuple[Message, ...]:
        """Messages added in this transaction, in order."""
        return tuple(message for message, _ in self._staged)

    @property
    def staged_stubs(self) -> tuple[MessageStub, ...]:
        """The stubs to insert when this transaction commits (each backend writes them in its commit
        step).
        """
        return tuple(stub for _, stub in self._staged)

    def on_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once this transaction has committed (never after a rollback)."""
        self._callbacks.append(callback)

    #: Whether :meth:`savepoint` works here (SQL databases); the idempotent consumer then runs a
    #: whole batch in one transaction, each message in its own savepoint.
    supports_savepoints = False

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A part of this transaction that fails alone: an exception inside rolls back only what
        was written (and staged in the outbox, and registered with :meth:`on_commit`) since it
        began, then propagates; the transaction itself goes on."""
        staged, callbacks = len(self._staged), len(self._callbacks)
        try:
            async with self._savepoint():
                yield
        except BaseException:
            del self._staged[staged:]
            del self._callbacks[callbacks:]
            raise

    def _savepoint(self) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError(f"{type(self).__name__} has no savepoints")

    def lost_whole(self, exc: BaseException) -> bool:
        """Whether ``exc`` (raised inside a savepoint) cost the whole transaction, not just the
        savepoint's part — a MariaDB/MySQL deadlock rolls everything back — so nothing of it
        may be committed or counted."""
        return False

    def _run_commit_callbacks(self) -> None:
        for callback in self._callbacks:
            try:
                callback()
            except Exception:  # the commit happened; a failing observer must not undo that
                _log.exception("on_commit callback %r failed", callback)

    @abstractmethod
    async def claim_log(self, group: str, message_id: str, now: datetime) -> bool:
        """Move the log row from RECEIVED to CONSUMED; False when it is not RECEIVED.

        The row stays locked until this transaction ends, so a concurrent claimer of the same row
        waits and then sees the outcome (CONSUMED after a commit, RECEIVED after a rollback).
        """

    @abstractmethod
    async def confirm_stub(self, message_id: str, now: datetime) -> StubConfirmation:
        """Move the stub to CONFIRMED (from any other status), locking it until the end."""

    @abstractmethod
    async def stub_status(self, message_id: str) -> StubStatus | None:
        """The stub's status as this transaction sees it; None when there is no stub."""

    async def claim_logs(self, group: str, message_ids: Sequence[str], now: datetime) -> int:
        """:meth:`claim_log` for each id; how many moved to CONSUMED (backends override it with
        one statement)."""
        return sum([await self.claim_log(group, message_id, now) for message_id in message_ids])

    async def confirm_stubs(self, message_ids: Sequence[str], now: datetime) -> bool:
        """:meth:`confirm_stub` for each id; False (and nothing is promised about the others)
        when one was CONFIRMED already — a message consumed long ago."""
        for message_id in message_ids:
            confirmation = await self.confirm_stub(message_id, now)
            if confirmation is StubConfirmation.ALREADY_CONFIRMED:
                return False
        return True


TxT = TypeVar("TxT", bound=Transaction)


class ReliabilityBackend(AsyncResource, ABC, Generic[TxT]):
    """Stores message stubs and the message log. An async context manager; close with aclose().

    Why one abstract class for every store: the relay, the scheduler, the idempotent consumer
    and the Spark resend job are written once against it, and one contract test suite holds
    memory, SQLite, PostgreSQL and MariaDB to the same behaviour.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._commit_listeners: list[CommitListener] = []

    # -- lifecycle ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release connections. Idempotent."""

    @abstractmethod
    async def create_schema(self) -> None:
        """Create the tables if missing (a no-op where there are none)."""

    # -- transactions ------------------------------------------------------------------------

    @abstractmethod
    def transaction(self) -> AbstractAsyncContextManager[TxT]:
        """``async with backend.transaction() as tx:`` — commit on exit, roll back on error."""

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Call ``listener(messages)`` after every commit that staged outbox messages."""
        self._commit_listeners.append(listener)

    def remove_commit_listener(self, listener: CommitListener) -> None:
        """Stop calling ``listener``: a relay that closes unregisters itself, so a closed relay
        is not woken.
        """
        if listener in self._commit_listeners:
            self._commit_listeners.remove(listener)

    def _committed(self, tx: Transaction) -> None:
        """Backends call this after a successful commit."""
        tx._run_commit_callbacks()
        messages = tx.staged_messages
        if messages:
            for listener in list(self._commit_listeners):
                try:
                    listener(messages)
                except Exception:
                    _log.exception("commit listener %r failed", listener)

    # -- stubs -------------------------------------------------------------------------------

    @abstractmethod
    async def get_stub(self, message_id: str) -> MessageStub | None:
        """The stub with this id, or None (operators and tests; the workers select stubs in
        pages).
        """

    @abstractmethod
    async def stub_status(self, message_id: str) -> StubStatus | None:
        """The stub's status without loading its body; None when there is no stub."""

    @abstractmethod
    async def list_stubs(
        self,
        *,
        status: StubStatus | None = None,
        alerted: bool | None = None,
        limit: int = 100,
    ) -> list[MessageStub]:
        """Stubs by creation time (oldest first), optionally filtered."""

    @abstractmethod
    async def stubs_for_relay(self, now: datetime, *, limit: int) -> list[MessageStub]:
        """Never-sent stubs that are due: UNCONFIRMED, send_count = 0, next_resend_at <= now."""

    @abstractmethod
    async def stubs_for_resend(
        self,
        now: datetime,
        *,
        max_sends: int,
        group: str | None,
        offset_wait: float | None,
        limit: int,
    ) -> list[MessageStub]:
        """The resend selection (docs/reliability.md "Resend scheduler and manual handling").

        status IN (UNCONFIRMED, UNKNOWN) AND send_count < max_sends AND next_resend_at <= now
        AND the id has no log row (for ``group``, or any group when None) AND (queue_offset IS
        NULL OR queue_offset < the largest logged offset on the same topic/broker/queue OR
        next_resend_at <= now - offset_wait). Ordered by next_resend_at.
        """

    @abstractmethod
    async def claim_stub(self, stub: MessageStub, *, until: datetime, now: datetime) -> bool:
        """Compare-and-set: push ``next_resend_at`` to ``until`` if the stub is unchanged.

        Unchanged means the same send_count and next_resend_at as in ``stub`` and a pending
        status. Exactly one of several concurrent claimers wins.
        """

    @abstractmethod
    async def record_sent(
        self, message_id: str, result: SendResult, *, next_resend_at: datetime, now: datetime
    ) -> None:
        """A send succeeded: send_count + 1, the stored position, next resend time.

        UNKNOWN becomes UNCONFIRMED; CONFIRMED and VOID stay as they are.
        """

    @abstractmethod
    async def record_send_failed(
        self,
        message_id: str,
        *,
        outcome_unknown: bool,
        error: str,
        next_resend_at: datetime,
        now: datetime,
    ) -> None:
        """A send failed: send_count + 1, last_error, next resend time.

        When the outcome is unknown a pending stub becomes UNKNOWN.
        """

    @abstractmethod
    async def stubs_exhausted(
        self, now: datetime, *, max_sends: int, limit: int
    ) -> list[MessageStub]:
        """Pending stubs with send_count >= max_sends, due, not yet handed to manual handling."""

    @abstractmethod
    async def mark_manual(self, message_id: str, note: str, now: datetime) -> bool:
        """Compare-and-set ``last_error = 'manual: <note>'``; False if already marked."""

    @abstractmethod
    async def clear_manual(self, message_id: str, restore: str | None, now: datetime) -> None:
        """Undo :meth:`mark_manual` (used when the alert itself failed)."""

    @abstractmethod
    async def void_stub(self, message_id: str, now: datetime) -> MessageStub:
        """Operator: stop resending. Raises StubNotFoundError, or StubStateError if CONFIRMED."""

    @abstractmethod
    async def reschedule_stub(self, message_id: str, now: datetime) -> MessageStub:
        """Operator: send again now with a fresh budget of sends.

        Sets status UNCONFIRMED, send_count 0, next_resend_at now, clears the stored position and
        the manual marker. Raises StubNotFoundError, or StubStateError if CONFIRMED.
        """

    # -- message log -------------------------------------------------------------------------

    @abstractmethod
    async def log_receipt(self, group: str, message: MessageView, now: datetime) -> LogEntry:
        """Insert a RECEIVED row, or add one to receive_count of the existing row; return it.

        Commits at once, independent of any business transaction: the receipt is the scheduler's
        proof that the message arrived, whatever the handler does next.
        """

    async def log_receipts(
        self, group: str, messages: Sequence[MessageView], now: datetime
    ) -> list[LogEntry]:
        """:meth:`log_receipt` for a batch, entries in the order of ``messages``.

        The same id twice in one batch counts two receipts. Backends override this to write the
        batch in one statement.
        """
        entries: dict[str, LogEntry] = {}
        for message in messages:
            entries[message.message_id] = await self.log_receipt(group, message, now)
        return [entries[m.message_id] for m in messages]

    @abstractmethod
    async def get_log(self, group: str, message_id: str) -> LogEntry | None:
        """The log row of (group, message id), or None: the consumer re-reads it after a failed
        handler to tell a lost race from a failure.
        """

    @abstractmethod
    async def list_log(self, *, group: str | None = None, limit: int = 100) -> list[LogEntry]:
        """Log rows by first receipt (oldest first)."""

    @abstractmethod
    async def prune_log(self, *, older_than: datetime, group: str | None = None) -> int:
        """Delete CONSUMED rows consumed before ``older_than``; return how many.

        The highest-offset row of each (group, topic, broker, queue) is always kept: the resend
        rule needs the largest logged offset even after the log drains.
        """


class LeaseStore(ABC):
    """Short-lived exclusive leases on (group, message id): the duplicate-work fast path.

    Only an optimisation: it keeps two workers from running one handler at the same time, while
    the database's conditional update decides correctness (docs/reliability.md, "Consumer: the
    idempotent wrapper").
    """

    @abstractmethod
    async def acquire(self, group: str, message_id: str, ttl: float) -> str | None:
        """Take the lease for ``ttl`` seconds; return a token, or None when someone holds it."""

    @abstractmethod
    async def release(self, group: str, message_id: str, token: str) -> bool:
        """Give the lease back if ``token`` still holds it; return whether it did."""

    async def acquire_many(
        self, group: str, message_ids: Sequence[str], ttl: float
    ) -> list[str | None]:
        """:meth:`acquire` for each id, in order (stores override it with one round trip)."""
        return [await self.acquire(group, message_id, ttl) for message_id in message_ids]

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Idempotent."""
