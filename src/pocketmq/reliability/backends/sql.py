"""The SQL backend: SQLite (embedded default), PostgreSQL and MariaDB/MySQL via SQLAlchemy 2.

Why SQLAlchemy's asyncio layer (and not the sync engine in ``asyncio.to_thread``): the business
handler runs *inside* the toolkit's transaction and writes its own rows there, so it needs a
database handle it can await. With the sync engine every handler statement would need its own
thread hop or the handler would block the event loop. The async layer gives the handler an
``AsyncConnection`` (and an ``AsyncSession`` for ORM users) on the very transaction that claims the
log row, with native async drivers where they exist:

=============  ===========================================  ================================
database       URL you may write                            driver used
=============  ===========================================  ================================
SQLite         ``sqlite:///./data/reliability.db``           aiosqlite (sqlite3 in a thread)
PostgreSQL     ``postgresql+psycopg://user@host:5432/db``    psycopg 3, native async
MariaDB/MySQL  ``mysql+pymysql://root@host:3306/db``         asyncmy (a Cython MySQL protocol)
=============  ===========================================  ================================

:func:`async_url` rewrites the familiar sync URLs to their async drivers, so the same URL works
for the CLI, the Spark pipeline (which uses the sync form) and here.

SQLite allows one writer at a time and its default deferred transactions fail with "database is
locked" when two readers both try to upgrade to writing. Engines made by :meth:`SqlBackend.from_url`
therefore start every SQLite write transaction with ``BEGIN IMMEDIATE`` (writers queue on the busy
timeout instead of failing), reads with a plain ``BEGIN``, and switch the file to WAL (readers do
not wait for the writer). Pass your own engine to opt out. One consequence to keep in mind: while
a write transaction is open, another *write* through the same SQLite file waits for it, so do not
await a second writing transaction from inside the first.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Insert,
    RowMapping,
    and_,
    case,
    delete,
    event,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import CursorResult, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine

from pocketmq.client import Message, MessageView, SendResult
from pocketmq.reliability.backend import ReliabilityBackend, StubConfirmation, Transaction
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock
from pocketmq.reliability.errors import DuplicateMessageIdError, StubNotFoundError, StubStateError
from pocketmq.reliability.schema import ReliabilityTables, reliability_tables
from pocketmq.reliability.stub import (
    MANUAL_PREFIX,
    PENDING_STATUSES,
    LogEntry,
    LogStatus,
    MessageStub,
    StubStatus,
    stub_for,
)

__all__ = ["DEFAULT_URL", "SqlBackend", "SqlTransaction", "async_url"]

#: the embedded default: a SQLite file under ./data
DEFAULT_URL = "sqlite:///./data/reliability.db"

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg2": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+asyncmy",
    "mysql+pymysql": "mysql+asyncmy",
    "mariadb": "mysql+asyncmy",
    "mariadb+pymysql": "mysql+asyncmy",
}
_PENDING = [s.value for s in PENDING_STATUSES]
_READ_ONLY = "pocketmq_read_only"


def async_url(url: str) -> str:
    """The async-driver form of a database URL (already-async URLs pass through)."""
    parsed = make_url(url)
    driver = _ASYNC_DRIVERS.get(parsed.drivername, parsed.drivername)
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def _keys_column(keys: Sequence[str]) -> str | None:
    return " ".join(keys) if keys else None


def _stub_values(stub: MessageStub) -> dict[str, Any]:
    return {
        "message_id": stub.message_id,
        "topic": stub.topic,
        "tag": stub.tag,
        "keys": _keys_column(stub.keys),
        "content": stub.content,
        "status": stub.status.value,
        "send_count": stub.send_count,
        "broker_name": stub.broker_name,
        "queue_id": stub.queue_id,
        "queue_offset": stub.queue_offset,
        "next_resend_at": stub.next_resend_at,
        "created_at": stub.created_at,
        "updated_at": stub.updated_at,
        "last_error": stub.last_error,
    }


def _stub_from_row(row: RowMapping) -> MessageStub:
    keys = row["keys"]
    return MessageStub(
        message_id=row["message_id"],
        topic=row["topic"],
        tag=row["tag"],
        keys=tuple(keys.split()) if keys else (),
        content=bytes(row["content"]),
        status=StubStatus(row["status"]),
        send_count=row["send_count"],
        broker_name=row["broker_name"],
        queue_id=row["queue_id"],
        queue_offset=row["queue_offset"],
        next_resend_at=row["next_resend_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_error=row["last_error"],
    )


def _log_from_row(row: RowMapping) -> LogEntry:
    return LogEntry(
        consumer_group=row["consumer_group"],
        message_id=row["message_id"],
        topic=row["topic"],
        broker_name=row["broker_name"],
        queue_id=row["queue_id"],
        queue_offset=row["queue_offset"],
        status=LogStatus(row["status"]),
        receive_count=row["receive_count"],
        created_at=row["created_at"],
        consumed_at=row["consumed_at"],
    )


def _rowcount(result: object) -> int:
    return cast(CursorResult[Any], result).rowcount


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
            self._session = AsyncSession(bind=self.connection, expire_on_commit=False)
        return self._session

    async def claim_log(self, group: str, message_id: str, now: datetime) -> bool:
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
        return _rowcount(result) == 1

    async def confirm_stub(self, message_id: str, now: datetime) -> StubConfirmation:
        stub = self._tables.stub
        result = await self.connection.execute(
            update(stub)
            .where(stub.c.message_id == message_id, stub.c.status != StubStatus.CONFIRMED.value)
            .values(status=StubStatus.CONFIRMED.value, updated_at=now)
        )
        if _rowcount(result) == 1:
            return StubConfirmation.CONFIRMED
        found = await self.connection.scalar(
            select(stub.c.status).where(stub.c.message_id == message_id)
        )
        return StubConfirmation.NO_STUB if found is None else StubConfirmation.ALREADY_CONFIRMED

    async def stub_status(self, message_id: str) -> StubStatus | None:
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
                    insert(self._tables.stub), [_stub_values(s) for s in stubs]
                )
            except IntegrityError as exc:
                raise DuplicateMessageIdError(tuple(s.message_id for s in stubs)) from exc

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class SqlBackend(ReliabilityBackend[SqlTransaction]):
    """Stubs and log rows in an SQL database reached through an :class:`AsyncEngine`."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table_prefix: str = "",
        schema: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        owns_engine: bool = False,
    ) -> None:
        super().__init__(clock=clock)
        self.engine = engine
        self.tables: ReliabilityTables = reliability_tables(
            table_prefix=table_prefix, schema=schema
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
        clock: Clock = SYSTEM_CLOCK,
        **engine_options: Any,
    ) -> SqlBackend:
        """A backend with its own engine for ``url`` (sync driver names are mapped to async)."""
        target = make_url(async_url(url))
        if target.get_backend_name() == "sqlite":
            database = target.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                directory = os.path.dirname(os.path.abspath(database))
                os.makedirs(directory, exist_ok=True)
            connect_args = dict(engine_options.pop("connect_args", {}))
            connect_args.setdefault("timeout", 30.0)
            engine = create_async_engine(target, connect_args=connect_args, **engine_options)
            _configure_sqlite(engine)
        else:
            engine = create_async_engine(target, **engine_options)
        return cls(engine, table_prefix=table_prefix, schema=schema, clock=clock, owns_engine=True)

    def __repr__(self) -> str:
        return f"SqlBackend({self.engine.url!r}, stub={self.tables.stub.name!r})"

    async def aclose(self) -> None:
        if self._owns_engine:
            await self.engine.dispose()

    async def create_schema(self) -> None:
        async with self.engine.begin() as conn:
            await conn.run_sync(self.tables.metadata.create_all)

    async def drop_schema(self) -> None:
        """Drop both tables (tests and ``init-db --drop``)."""
        async with self.engine.begin() as conn:
            await conn.run_sync(self.tables.metadata.drop_all)

    # -- transactions ------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlTransaction]:
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
        return message, insert(self.tables.stub).values(**_stub_values(stub))

    async def add_message(
        self, connection: AsyncConnection | AsyncSession, message: Message
    ) -> Message:
        """Insert the stub for ``message`` now, in the caller's open transaction."""
        message, statement = self.stub_insert(message)
        await connection.execute(statement)
        return message

    # -- helpers -----------------------------------------------------------------------------

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads only (SQLite: a deferred BEGIN that does not queue on writers)."""
        async with self.engine.connect() as conn:
            if self._dialect == "sqlite":
                yield await conn.execution_options(**{_READ_ONLY: True})
            else:
                yield await conn.execution_options(isolation_level="AUTOCOMMIT")

    @asynccontextmanager
    async def _single(self) -> AsyncIterator[AsyncConnection]:
        """A connection for one self-contained statement.

        PostgreSQL and MySQL run it in autocommit mode (no BEGIN/COMMIT round trips: a single
        statement is atomic by itself); SQLite keeps its explicit BEGIN IMMEDIATE.
        """
        if self._dialect == "sqlite":
            async with self.engine.begin() as conn:
                yield conn
        else:
            async with self.engine.connect() as conn:
                yield await conn.execution_options(isolation_level="AUTOCOMMIT")

    async def _fetch_stubs(self, statement: Any) -> list[MessageStub]:
        async with self._reading() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [_stub_from_row(row) for row in rows]

    async def _execute(self, statement: Any) -> int:
        async with self._single() as conn:
            return _rowcount(await conn.execute(statement))

    # -- stubs -------------------------------------------------------------------------------

    async def get_stub(self, message_id: str) -> MessageStub | None:
        stub = self.tables.stub
        found = await self._fetch_stubs(select(stub).where(stub.c.message_id == message_id))
        return found[0] if found else None

    async def stub_status(self, message_id: str) -> StubStatus | None:
        stub = self.tables.stub
        async with self._reading() as conn:
            found = await conn.scalar(select(stub.c.status).where(stub.c.message_id == message_id))
        return None if found is None else StubStatus(found)

    def _require_stub(self, found: MessageStub | None, message_id: str) -> MessageStub:
        if found is None:
            raise StubNotFoundError(message_id)
        return found

    async def list_stubs(
        self,
        *,
        status: StubStatus | None = None,
        alerted: bool | None = None,
        limit: int = 100,
    ) -> list[MessageStub]:
        stub = self.tables.stub
        statement = select(stub)
        if status is not None:
            statement = statement.where(stub.c.status == status.value)
        if alerted is True:
            statement = statement.where(stub.c.last_error.like(f"{MANUAL_PREFIX}%"))
        elif alerted is False:
            statement = statement.where(
                or_(stub.c.last_error.is_(None), stub.c.last_error.not_like(f"{MANUAL_PREFIX}%"))
            )
        statement = statement.order_by(stub.c.created_at, stub.c.message_id).limit(limit)
        return await self._fetch_stubs(statement)

    async def stubs_for_relay(self, now: datetime, *, limit: int) -> list[MessageStub]:
        stub = self.tables.stub
        statement = (
            select(stub)
            .where(
                stub.c.status == StubStatus.UNCONFIRMED.value,
                stub.c.send_count == 0,
                stub.c.next_resend_at <= now,
            )
            .order_by(stub.c.created_at, stub.c.message_id)
            .limit(limit)
        )
        return await self._fetch_stubs(statement)

    async def stubs_for_resend(
        self,
        now: datetime,
        *,
        max_sends: int,
        group: str | None,
        offset_wait: float | None,
        limit: int,
    ) -> list[MessageStub]:
        stub, log = self.tables.stub, self.tables.log
        logged = log.alias("logged")
        passed = log.alias("passed")
        in_log: ColumnElement[bool] = logged.c.message_id == stub.c.message_id
        same_queue: ColumnElement[bool] = and_(
            passed.c.topic == stub.c.topic,
            passed.c.broker_name == stub.c.broker_name,
            passed.c.queue_id == stub.c.queue_id,
        )
        if group is not None:
            in_log = and_(in_log, logged.c.consumer_group == group)
            same_queue = and_(same_queue, passed.c.consumer_group == group)
        max_logged = select(func.max(passed.c.queue_offset)).where(same_queue).scalar_subquery()
        offset_ok = [stub.c.queue_offset.is_(None), stub.c.queue_offset < max_logged]
        if offset_wait is not None:
            offset_ok.append(stub.c.next_resend_at <= now - timedelta(seconds=offset_wait))
        statement = (
            select(stub)
            .where(
                stub.c.status.in_(_PENDING),
                stub.c.send_count < max_sends,
                stub.c.next_resend_at <= now,
                ~exists().where(in_log),
                or_(*offset_ok),
            )
            .order_by(stub.c.next_resend_at, stub.c.message_id)
            .limit(limit)
        )
        return await self._fetch_stubs(statement)

    async def claim_stub(self, stub: MessageStub, *, until: datetime, now: datetime) -> bool:
        table = self.tables.stub
        return (
            await self._execute(
                update(table)
                .where(
                    table.c.message_id == stub.message_id,
                    table.c.status.in_(_PENDING),
                    table.c.send_count == stub.send_count,
                    table.c.next_resend_at == stub.next_resend_at,
                )
                .values(next_resend_at=until, updated_at=now)
            )
            == 1
        )

    async def record_sent(
        self, message_id: str, result: SendResult, *, next_resend_at: datetime, now: datetime
    ) -> None:
        table = self.tables.stub
        await self._execute(
            update(table)
            .where(table.c.message_id == message_id)
            .values(
                status=case(
                    (table.c.status == StubStatus.UNKNOWN.value, StubStatus.UNCONFIRMED.value),
                    else_=table.c.status,
                ),
                send_count=table.c.send_count + 1,
                broker_name=result.broker_name,
                queue_id=result.queue_id,
                queue_offset=result.queue_offset,
                next_resend_at=next_resend_at,
                updated_at=now,
                last_error=None,
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
        table = self.tables.stub
        status: Any = table.c.status
        if outcome_unknown:
            status = case(
                (table.c.status.in_(_PENDING), StubStatus.UNKNOWN.value), else_=table.c.status
            )
        await self._execute(
            update(table)
            .where(table.c.message_id == message_id)
            .values(
                status=status,
                send_count=table.c.send_count + 1,
                next_resend_at=next_resend_at,
                updated_at=now,
                last_error=error,
            )
        )

    async def stubs_exhausted(
        self, now: datetime, *, max_sends: int, limit: int
    ) -> list[MessageStub]:
        stub = self.tables.stub
        statement = (
            select(stub)
            .where(
                stub.c.status.in_(_PENDING),
                stub.c.send_count >= max_sends,
                stub.c.next_resend_at <= now,
                or_(stub.c.last_error.is_(None), stub.c.last_error.not_like(f"{MANUAL_PREFIX}%")),
            )
            .order_by(stub.c.next_resend_at, stub.c.message_id)
            .limit(limit)
        )
        return await self._fetch_stubs(statement)

    async def mark_manual(self, message_id: str, note: str, now: datetime) -> bool:
        stub = self.tables.stub
        return (
            await self._execute(
                update(stub)
                .where(
                    stub.c.message_id == message_id,
                    or_(
                        stub.c.last_error.is_(None),
                        stub.c.last_error.not_like(f"{MANUAL_PREFIX}%"),
                    ),
                )
                .values(last_error=f"{MANUAL_PREFIX} {note}", updated_at=now)
            )
            == 1
        )

    async def clear_manual(self, message_id: str, restore: str | None, now: datetime) -> None:
        stub = self.tables.stub
        await self._execute(
            update(stub)
            .where(stub.c.message_id == message_id, stub.c.last_error.like(f"{MANUAL_PREFIX}%"))
            .values(last_error=restore, updated_at=now)
        )

    async def _operator_update(
        self, message_id: str, operation: str, values: dict[str, Any]
    ) -> MessageStub:
        stub = self.tables.stub
        changed = await self._execute(
            update(stub)
            .where(stub.c.message_id == message_id, stub.c.status != StubStatus.CONFIRMED.value)
            .values(**values)
        )
        current = self._require_stub(await self.get_stub(message_id), message_id)
        if changed != 1:
            raise StubStateError(message_id, current.status.value, operation)
        return current

    async def void_stub(self, message_id: str, now: datetime) -> MessageStub:
        return await self._operator_update(
            message_id, "void", {"status": StubStatus.VOID.value, "updated_at": now}
        )

    async def reschedule_stub(self, message_id: str, now: datetime) -> MessageStub:
        return await self._operator_update(
            message_id,
            "resend",
            {
                "status": StubStatus.UNCONFIRMED.value,
                "send_count": 0,
                "broker_name": None,
                "queue_id": None,
                "queue_offset": None,
                "next_resend_at": now,
                "updated_at": now,
                "last_error": None,
            },
        )

    # -- message log -------------------------------------------------------------------------

    async def log_receipt(self, group: str, message: MessageView, now: datetime) -> LogEntry:
        return (await self.log_receipts(group, [message], now))[0]

    async def log_receipts(
        self, group: str, messages: Sequence[MessageView], now: datetime
    ) -> list[LogEntry]:
        """One multi-row upsert for a whole batch: one round trip and one commit, not N."""
        if not messages:
            return []
        # the same id twice in one batch: one row, counted twice (an upsert may not touch a row
        # twice); sorted by id so concurrent batches lock rows in the same order
        copies = Counter(m.message_id for m in messages)
        first = {m.message_id: m for m in reversed(messages)}
        rows = [
            {
                "consumer_group": group,
                "message_id": message_id,
                "topic": first[message_id].topic,
                "broker_name": first[message_id].broker_name,
                "queue_id": first[message_id].queue_id,
                "queue_offset": first[message_id].queue_offset,
                "status": LogStatus.RECEIVED.value,
                "receive_count": copies[message_id],
                "created_at": now,
                "consumed_at": None,
            }
            for message_id in sorted(copies)
        ]
        found = await self._upsert_receipts(group, rows)
        return [found[m.message_id] for m in messages]

    async def _upsert_receipts(self, group: str, rows: list[dict[str, Any]]) -> dict[str, LogEntry]:
        log = self.tables.log
        keys = [log.c.consumer_group, log.c.message_id]
        ids = [row["message_id"] for row in rows]
        async with self._single() as conn:
            if self._dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                pg_insert_rows = pg_insert(log).values(rows)
                pg_statement = pg_insert_rows.on_conflict_do_update(
                    index_elements=keys,
                    set_={
                        "receive_count": log.c.receive_count + pg_insert_rows.excluded.receive_count
                    },
                ).returning(*log.c)
                result = (await conn.execute(pg_statement)).mappings().all()
            elif self._dialect == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as sqlite_insert

                sqlite_insert_rows = sqlite_insert(log).values(rows)
                sqlite_statement = sqlite_insert_rows.on_conflict_do_update(
                    index_elements=keys,
                    set_={
                        "receive_count": log.c.receive_count
                        + sqlite_insert_rows.excluded.receive_count
                    },
                ).returning(*log.c)
                result = (await conn.execute(sqlite_statement)).mappings().all()
            elif self._dialect in ("mysql", "mariadb"):
                from sqlalchemy.dialects.mysql import insert as mysql_insert

                mysql_statement = mysql_insert(log).values(rows)
                await conn.execute(
                    mysql_statement.on_duplicate_key_update(
                        receive_count=log.c.receive_count + mysql_statement.inserted.receive_count
                    )
                )
                result = (
                    (
                        await conn.execute(
                            select(log).where(
                                log.c.consumer_group == group, log.c.message_id.in_(ids)
                            )
                        )
                    )
                    .mappings()
                    .all()
                )
            else:
                result = []
        if self._dialect not in ("postgresql", "sqlite", "mysql", "mariadb"):
            return {row["message_id"]: await self._log_receipt_portable(group, row) for row in rows}
        return {row["message_id"]: _log_from_row(row) for row in result}

    async def _log_receipt_portable(self, group: str, values: dict[str, Any]) -> LogEntry:
        """Insert, or bump on conflict, for dialects without an upsert we know."""
        log = self.tables.log
        where = (log.c.consumer_group == group, log.c.message_id == values["message_id"])
        async with self.engine.begin() as conn:
            try:
                async with conn.begin_nested():
                    await conn.execute(insert(log).values(**values))
            except IntegrityError:
                bump = log.c.receive_count + values["receive_count"]
                await conn.execute(update(log).where(*where).values(receive_count=bump))
            row = (await conn.execute(select(log).where(*where))).mappings().one()
            return _log_from_row(row)

    async def get_log(self, group: str, message_id: str) -> LogEntry | None:
        log = self.tables.log
        async with self._reading() as conn:
            row = (
                (
                    await conn.execute(
                        select(log).where(
                            log.c.consumer_group == group, log.c.message_id == message_id
                        )
                    )
                )
                .mappings()
                .one_or_none()
            )
        return None if row is None else _log_from_row(row)

    async def list_log(self, *, group: str | None = None, limit: int = 100) -> list[LogEntry]:
        log = self.tables.log
        statement = select(log)
        if group is not None:
            statement = statement.where(log.c.consumer_group == group)
        statement = statement.order_by(
            log.c.created_at, log.c.consumer_group, log.c.message_id
        ).limit(limit)
        async with self._reading() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [_log_from_row(row) for row in rows]

    async def prune_log(self, *, older_than: datetime, group: str | None = None) -> int:
        log = self.tables.log
        top = log.alias("top")
        higher = log.alias("higher")
        # a row is the highest of its queue when no row of the same queue has a larger offset
        is_highest = ~exists().where(
            higher.c.consumer_group == top.c.consumer_group,
            higher.c.topic == top.c.topic,
            higher.c.broker_name == top.c.broker_name,
            higher.c.queue_id == top.c.queue_id,
            higher.c.queue_offset > top.c.queue_offset,
        )
        stub = self.tables.stub
        conditions: list[ColumnElement[bool]] = [
            log.c.status == LogStatus.CONSUMED.value,
            log.c.consumed_at < older_than,
            # While the message's stub is pending, its log row is what keeps the resend rule
            # from sending it again (log-only consumers never confirm stubs).
            ~exists().where(stub.c.message_id == log.c.message_id, stub.c.status.in_(_PENDING)),
        ]
        if group is not None:
            conditions.append(log.c.consumer_group == group)
        async with self.engine.begin() as conn:
            # MySQL cannot reference the table being deleted from in a subquery, so the rows to
            # keep are read first (one per queue: cheap) and excluded by key.
            keep = (
                await conn.execute(select(top.c.consumer_group, top.c.message_id).where(is_highest))
            ).all()
            doomed = select(log.c.consumer_group, log.c.message_id).where(*conditions)
            candidates = (await conn.execute(doomed)).all()
            kept = {(g, m) for g, m in keep}
            victims = [(g, m) for g, m in candidates if (g, m) not in kept]
            for start in range(0, len(victims), 500):
                chunk = victims[start : start + 500]
                await conn.execute(
                    delete(log).where(
                        or_(
                            *(
                                and_(log.c.consumer_group == g, log.c.message_id == m)
                                for g, m in chunk
                            )
                        )
                    )
                )
        return len(victims)


def _configure_sqlite(engine: AsyncEngine) -> None:
    """WAL journal, and BEGIN IMMEDIATE for every transaction (see the module docstring)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(_READ_ONLY):
            connection.exec_driver_sql("BEGIN")  # WAL readers never wait for the writer
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
