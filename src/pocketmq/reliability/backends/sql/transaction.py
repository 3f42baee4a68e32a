"""The SQL transaction the application and the toolkit share.

Why the application gets the connection itself: the idempotent consumer's guarantee is that the
handler's business rows, the log row's ``CONSUMED`` and the stub's ``CONFIRMED`` commit together
or not at all (docs/reliability.md "Consumer: the idempotent wrapper"), and the outbox's is that
the stub commits with the business change ("Producer: outbox and relay"). Both need the business
writes on the very connection that holds the toolkit's rows, so the transaction hands it out —
as a Core ``AsyncConnection`` and, for ORM code, an ``AsyncSession`` bound to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from pocketmq.reliability.backend import StubConfirmation, Transaction
from pocketmq.reliability.backends.sql.engine import rowcount
from pocketmq.reliability.errors import DuplicateMessageIdError
from pocketmq.reliability.stub import LogStatus, StubStatus

if TYPE_CHECKING:
    from pocketmq.reliability.backends.sql.backend import SqlBackend

__all__ = ["SqlTransaction"]


class SqlTransaction(Transaction):
    """A transaction on one database connection, shared with the application.

    ``connection`` is the SQLAlchemy :class:`~sqlalchemy.ext.asyncio.AsyncConnection` inside the
    transaction: write business rows with it (``await tx.connection.execute(...)``). ORM users take
    ``session``, an :class:`~sqlalchemy.ext.asyncio.AsyncSession` bound to the same connection; it
    is flushed before the commit. Do not commit either yourself: leaving the ``async with`` block
    commits, an exception rolls back.
    """

    def __init__(self, backend: SqlBackend, connection: AsyncConnection) -> None:
        super().__init__(backend.clock)
        self._tables = backend.tables
        self.connection = connection
        self._session: AsyncSession | None = None

    @property
    def session(self) -> AsyncSession:
        """An ORM session on this transaction's connection (created on first use)."""
        if self._session is None:
            # joins the connection's transaction as it is (savepoints are ours to manage: the
            # idempotent consumer runs each message of a batch in one)
            self._session = AsyncSession(
                bind=self.connection,
                expire_on_commit=False,
                join_transaction_mode="rollback_only",
            )
        return self._session

    supports_savepoints = True

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[None]:
        """``SAVEPOINT`` on the connection; the ORM session's pending rows are flushed into it,
        and dropped with it when it rolls back."""
        nested = await self.connection.begin_nested()
        try:
            yield
            if self._session is not None:
                await self._session.flush()
        except BaseException:
            if self._session is not None:  # its pending objects belong to the failed part
                self._session.expunge_all()
                await self._session.close()
                self._session = None
            await nested.rollback()
            raise
        await nested.commit()

    def lost_whole(self, exc: BaseException) -> bool:
        """MariaDB/MySQL roll the whole transaction back on a deadlock (1213), after which the
        savepoint is gone (1305); PostgreSQL and SQLite only lose the savepoint's part."""
        if self.connection.dialect.name not in ("mysql", "mariadb"):
            return False
        seen: BaseException | None = exc
        for _ in range(8):  # the deadlock may be the context of a failed ROLLBACK TO SAVEPOINT
            if seen is None:
                break
            original = getattr(seen, "orig", None)
            arguments = getattr(original, "args", ())
            if arguments and arguments[0] in (1213, 1305):
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    async def claim_log(self, group: str, message_id: str, now: datetime) -> bool:
        """RECEIVED -> CONSUMED as a conditional UPDATE: the row stays locked until commit, so a
        racing duplicate waits and then sees the outcome.
        """
        log = self._tables.log
        result = await self.connection.execute(
            update(log)
            .where(
                log.c.consumer_group == group,
                log.c.message_id == message_id,
                log.c.status == LogStatus.RECEIVED.value,
            )
            .values(status=LogStatus.CONSUMED.value, consumed_at=now)
        )
        return rowcount(result) == 1

    async def confirm_stub(self, message_id: str, now: datetime) -> StubConfirmation:
        """CONFIRMED as a conditional UPDATE in the handler's transaction; tells an already
        confirmed stub from a missing one.
        """
        stub = self._tables.stub
        result = await self.connection.execute(
            update(stub)
            .where(stub.c.message_id == message_id, stub.c.status != StubStatus.CONFIRMED.value)
            .values(status=StubStatus.CONFIRMED.value, updated_at=now)
        )
        if rowcount(result) == 1:
            return StubConfirmation.CONFIRMED
        found = await self.stub_status(message_id)
        return StubConfirmation.NO_STUB if found is None else StubConfirmation.ALREADY_CONFIRMED

    async def claim_logs(self, group: str, message_ids: Sequence[str], now: datetime) -> int:
        """RECEIVED -> CONSUMED for a whole batch in one conditional UPDATE."""
        log = self._tables.log
        result = await self.connection.execute(
            update(log)
            .where(
                log.c.consumer_group == group,
                log.c.message_id.in_(list(message_ids)),
                log.c.status == LogStatus.RECEIVED.value,
            )
            .values(status=LogStatus.CONSUMED.value, consumed_at=now)
        )
        return rowcount(result)

    async def confirm_stubs(self, message_ids: Sequence[str], now: datetime) -> bool:
        """One query for stubs CONFIRMED already (then False), one UPDATE for the rest."""
        stub = self._tables.stub
        ids = list(message_ids)
        confirmed = await self.connection.scalar(
            select(func.count())
            .select_from(stub)
            .where(stub.c.message_id.in_(ids), stub.c.status == StubStatus.CONFIRMED.value)
        )
        if confirmed:
            return False
        await self.connection.execute(
            update(stub)
            .where(stub.c.message_id.in_(ids))
            .values(status=StubStatus.CONFIRMED.value, updated_at=now)
        )
        return True

    async def stub_status(self, message_id: str) -> StubStatus | None:
        """The status as this transaction sees it (its own uncommitted changes included)."""
        stub = self._tables.stub
        found = await self.connection.scalar(
            select(stub.c.status).where(stub.c.message_id == message_id)
        )
        return None if found is None else StubStatus(found)

    async def _before_commit(self) -> None:
        if self._session is not None:
            await self._session.flush()
        stubs = self.staged_stubs
        if stubs:
            try:
                await self.connection.execute(
                    insert(self._tables.stub), [s.to_row() for s in stubs]
                )
            except IntegrityError as exc:
                raise DuplicateMessageIdError(tuple(s.message_id for s in stubs)) from exc

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
