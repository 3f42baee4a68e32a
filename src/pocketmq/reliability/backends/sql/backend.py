"""``SqlBackend``: the reliability contract on an SQL database, through an async engine.

Why a thin front: the contract (``pocketmq.reliability.backend``) is a list of operations, and
each is one SQL statement from :mod:`.stub_statements` or :mod:`.receipts` run through one of the
connection policies of :mod:`.engine`. This class only picks the statement and the policy, so
the rules stay readable in one place and the connection handling in another.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from pocketmq.client import Message, MessageView, SendResult
from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.backends.sql import receipts
from pocketmq.reliability.backends.sql import stub_statements as statements
from pocketmq.reliability.backends.sql.engine import (
    DEFAULT_URL,
    create_engine_for,
    reading,
    rowcount,
    single_statement,
)
from pocketmq.reliability.backends.sql.transaction import SqlTransaction
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock
from pocketmq.reliability.errors import StubNotFoundError, StubStateError
from pocketmq.reliability.schema import ReliabilityTables, reliability_tables
from pocketmq.reliability.stub import LogEntry, MessageStub, StubStatus, stub_for

__all__ = ["SqlBackend"]


class SqlBackend(ReliabilityBackend[SqlTransaction]):
    """Stubs and log rows in an SQL database reached through an :class:`AsyncEngine`.

    Why async: the business handler runs inside the toolkit's transaction and writes its own rows
    there, so it needs a database handle it can await; a sync engine in a thread would cost a
    thread hop per handler statement or block the event loop (docs/reliability.md "Databases and
    drivers").
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table_prefix: str = "",
        schema: str | None = None,
        stub_table: str | None = None,
        log_table: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        owns_engine: bool = False,
    ) -> None:
        super().__init__(clock=clock)
        self.engine = engine
        self.tables: ReliabilityTables = reliability_tables(
            table_prefix=table_prefix, schema=schema, stub_table=stub_table, log_table=log_table
        )
        self._owns_engine = owns_engine
        self._dialect = engine.dialect.name

    @classmethod
    def from_url(
        cls,
        url: str = DEFAULT_URL,
        *,
        table_prefix: str = "",
        schema: str | None = None,
        stub_table: str | None = None,
        log_table: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        **engine_options: Any,
    ) -> SqlBackend:
        """A backend with its own engine for ``url`` (sync driver names are mapped to async).

        The engine is closed by :meth:`aclose`; see :mod:`.engine` for the SQLite settings.
        """
        return cls(
            create_engine_for(url, **engine_options),
            table_prefix=table_prefix,
            schema=schema,
            stub_table=stub_table,
            log_table=log_table,
            clock=clock,
            owns_engine=True,
        )

    def __repr__(self) -> str:
        return f"SqlBackend({self.engine.url!r}, stub={self.tables.stub.name!r})"

    async def aclose(self) -> None:
        """Dispose of the engine if this backend created it (``from_url``); an engine passed in
        stays the caller's.
        """
        if self._owns_engine:
            await self.engine.dispose()

    async def create_schema(self) -> None:
        """``metadata.create_all``: creates missing tables and leaves existing ones alone, so it is
        safe at every start.
        """
        async with self.engine.begin() as conn:
            await conn.run_sync(self.tables.metadata.create_all)

    async def drop_schema(self) -> None:
        """Drop both tables (tests and ``init-db --drop``)."""
        async with self.engine.begin() as conn:
            await conn.run_sync(self.tables.metadata.drop_all)

    # -- transactions ------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlTransaction]:
        """One connection and one database transaction for the toolkit's rows and the application's;
        commit on exit.
        """
        async with self.engine.connect() as conn:
            tx = SqlTransaction(self, conn)
            try:
                async with conn.begin():
                    yield tx
                    await tx._before_commit()
            finally:
                await tx._close()
        self._committed(tx)

    def stub_insert(self, message: Message) -> tuple[Message, Insert]:
        """The stub INSERT for ``message``, to run in a transaction you manage yourself.

        For applications that own their session (sync or async): execute the returned statement
        in the same transaction as the business change. Returns the message with its id. The relay
        finds the stub on its next poll (or call ``relay.wakeup()`` after your commit).
        """
        message, stub = stub_for(message, self.clock.now())
        return message, insert(self.tables.stub).values(**stub.to_row())

    async def add_message(
        self, connection: AsyncConnection | AsyncSession, message: Message
    ) -> Message:
        """Insert the stub for ``message`` now, in the caller's open transaction."""
        message, statement = self.stub_insert(message)
        await connection.execute(statement)
        return message

    # -- running statements ------------------------------------------------------------------

    async def _fetch_stubs(self, statement: Any) -> list[MessageStub]:
        async with reading(self.engine) as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [MessageStub.from_row(row) for row in rows]

    async def _execute(self, statement: Any) -> int:
        async with single_statement(self.engine) as conn:
            return rowcount(await conn.execute(statement))

    # -- stubs -------------------------------------------------------------------------------

    async def get_stub(self, message_id: str) -> MessageStub | None:
        """The stub with this id, or None."""
        stub = self.tables.stub
        found = await self._fetch_stubs(select(stub).where(stub.c.message_id == message_id))
        return found[0] if found else None

    async def stub_status(self, message_id: str) -> StubStatus | None:
        """The status column alone: confirming a message must not load its body."""
        stub = self.tables.stub
        async with reading(self.engine) as conn:
            found = await conn.scalar(select(stub.c.status).where(stub.c.message_id == message_id))
        return None if found is None else StubStatus(found)

    async def list_stubs(
        self,
        *,
        status: StubStatus | None = None,
        alerted: bool | None = None,
        limit: int = 100,
    ) -> list[MessageStub]:
        """``stub_statements.listed`` on a read connection."""
        return await self._fetch_stubs(
            statements.listed(self.tables.stub, status=status, alerted=alerted, limit=limit)
        )

    async def stubs_for_relay(self, now: datetime, *, limit: int) -> list[MessageStub]:
        """``stub_statements.due_for_relay`` on a read connection."""
        return await self._fetch_stubs(statements.due_for_relay(self.tables.stub, now, limit=limit))

    async def stubs_for_resend(
        self,
        now: datetime,
        *,
        max_sends: int,
        group: str | None,
        offset_wait: float | None,
        limit: int,
    ) -> list[MessageStub]:
        """The resend rule as one SQL statement (``stub_statements.due_for_resend``)."""
        return await self._fetch_stubs(
            statements.due_for_resend(
                self.tables,
                now,
                max_sends=max_sends,
                group=group,
                offset_wait=offset_wait,
                limit=limit,
            )
        )

    async def claim_stub(self, stub: MessageStub, *, until: datetime, now: datetime) -> bool:
        """One compare-and-set UPDATE in its own transaction: exactly one of several claimers
        changes the row.
        """
        claim = statements.claim(
            self.tables.stub, stub, until=until, now=now, dialect=self._dialect
        )
        return await self._execute(claim) == 1

    async def record_sent(
        self, message_id: str, result: SendResult, *, next_resend_at: datetime, now: datetime
    ) -> None:
        """One UPDATE, in autocommit where the database allows it
        (``stub_statements.record_sent``).
        """
        await self._execute(
            statements.record_sent(
                self.tables.stub, message_id, result, next_resend_at=next_resend_at, now=now
            )
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
        """One UPDATE, in autocommit where the database allows it
        (``stub_statements.record_send_failed``).
        """
        await self._execute(
            statements.record_send_failed(
                self.tables.stub,
                message_id,
                outcome_unknown=outcome_unknown,
                error=error,
                next_resend_at=next_resend_at,
                now=now,
            )
        )

    async def stubs_exhausted(
        self, now: datetime, *, max_sends: int, limit: int
    ) -> list[MessageStub]:
        """``stub_statements.exhausted`` on a read connection."""
        return await self._fetch_stubs(
            statements.exhausted(self.tables.stub, now, max_sends=max_sends, limit=limit)
        )

    async def mark_manual(self, message_id: str, note: str, now: datetime) -> bool:
        """A compare-and-set UPDATE, so that several schedulers alert once."""
        return (
            await self._execute(statements.mark_manual(self.tables.stub, message_id, note, now))
            == 1
        )

    async def clear_manual(self, message_id: str, restore: str | None, now: datetime) -> None:
        """Undo :meth:`mark_manual` when every alert hook failed."""
        await self._execute(statements.clear_manual(self.tables.stub, message_id, restore, now))

    async def _operator_update(
        self, message_id: str, operation: str, values: dict[str, Any]
    ) -> MessageStub:
        changed = await self._execute(
            statements.operator_update(self.tables.stub, message_id, values)
        )
        current = await self.get_stub(message_id)
        if current is None:
            raise StubNotFoundError(message_id)
        if changed != 1:
            raise StubStateError(message_id, current.status.value, operation)
        return current

    async def void_stub(self, message_id: str, now: datetime) -> MessageStub:
        """Operator: stop resending (refused for a CONFIRMED stub, which is done)."""
        return await self._operator_update(
            message_id, "void", {"status": StubStatus.VOID.value, "updated_at": now}
        )

    async def reschedule_stub(self, message_id: str, now: datetime) -> MessageStub:
        """Operator: due now with a fresh budget of sends (refused for a CONFIRMED stub)."""
        return await self._operator_update(message_id, "resend", statements.reschedule_values(now))

    # -- message log -------------------------------------------------------------------------

    async def log_receipt(self, group: str, message: MessageView, now: datetime) -> LogEntry:
        """A batch of one (see :meth:`log_receipts`)."""
        return (await self.log_receipts(group, [message], now))[0]

    async def log_receipts(
        self, group: str, messages: Sequence[MessageView], now: datetime
    ) -> list[LogEntry]:
        """One multi-row upsert for a whole batch: one round trip and one commit, not N."""
        return await receipts.log_receipts(self.engine, self.tables, group, messages, now)

    async def get_log(self, group: str, message_id: str) -> LogEntry | None:
        """The log row of (group, message id), read without waiting for writers."""
        log = self.tables.log
        statement = select(log).where(log.c.consumer_group == group, log.c.message_id == message_id)
        async with reading(self.engine) as conn:
            row = (await conn.execute(statement)).mappings().one_or_none()
        return None if row is None else LogEntry.from_row(row)

    async def list_log(self, *, group: str | None = None, limit: int = 100) -> list[LogEntry]:
        """Log rows by first receipt, then group and id."""
        log = self.tables.log
        statement = select(log)
        if group is not None:
            statement = statement.where(log.c.consumer_group == group)
        statement = statement.order_by(
            log.c.created_at, log.c.consumer_group, log.c.message_id
        ).limit(limit)
        async with reading(self.engine) as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [LogEntry.from_row(row) for row in rows]

    async def prune_log(self, *, older_than: datetime, group: str | None = None) -> int:
        """See :func:`.receipts.prune_log`: old CONSUMED rows go, the rows the resend rule needs
        stay.
        """
        return await receipts.prune_log(
            self.engine, self.tables, older_than=older_than, group=group
        )
