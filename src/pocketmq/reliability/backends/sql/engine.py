"""Engines and connections of the SQL backend: which driver, and how each kind of work connects.

Why this is a module of its own: every statement the backend runs goes through one of three
connection policies, and getting them wrong shows up only under concurrency —

* a **transaction** the application writes into (``SqlBackend.transaction``);
* a **single statement** (claims, send records, receipts): atomic by itself, so PostgreSQL and
  MySQL run it in autocommit mode, one round trip instead of BEGIN/statement/COMMIT;
* a **read** (selections, lookups): autocommit on PostgreSQL and MySQL; on SQLite a deferred
  ``BEGIN`` that never waits for a writer.

SQLite allows one writer at a time, and its default deferred transactions fail with "database
is locked" when two readers both try to upgrade to writing. Engines made here therefore start
every SQLite write transaction with ``BEGIN IMMEDIATE`` (writers queue on the busy timeout
instead of failing), reads with a plain ``BEGIN``, and switch the file to WAL (readers do not wait
for the writer). Pass ``SqlBackend`` an engine of your own to opt out. One consequence to keep in
mind: while a write transaction is open, another *write* through the same SQLite file waits for
it, so do not await a second writing transaction from inside the first (docs/reliability.md
"Databases and drivers").
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, cast

from sqlalchemy import event
from sqlalchemy.engine import CursorResult, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from pocketmq.reliability.database_url import DEFAULT_DATABASE_URL, async_url

__all__ = [
    "DEFAULT_URL",
    "create_engine_for",
    "reading",
    "rowcount",
    "single_statement",
]

#: The embedded default: a SQLite file under ./data (docs/reliability.md "Defaults").
DEFAULT_URL: Final = DEFAULT_DATABASE_URL
#: Busy timeout of SQLite connections: how long a writer queues behind another one.
SQLITE_BUSY_TIMEOUT: Final = 30.0

#: How long a new connection retries switching a fresh file to WAL while another holds it.
_WAL_SWITCH_TIMEOUT: Final = 10.0

#: Execution option marking a SQLite connection as read-only (plain ``BEGIN``).
_READ_ONLY: Final = "pocketmq_read_only"


def create_engine_for(url: str, **engine_options: Any) -> AsyncEngine:
    """An async engine for ``url`` with the toolkit's driver and, for SQLite, its settings.

    Sync driver names are mapped to their async drivers
    (:func:`~pocketmq.reliability.database_url.async_url`). A SQLite file's directory is
    created if missing, so the embedded default works on a fresh machine.
    """
    target = make_url(async_url(url))
    if target.get_backend_name() != "sqlite":
        return create_async_engine(target, **engine_options)
    database = target.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
    connect_args = dict(engine_options.pop("connect_args", {}))
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT)
    engine = create_async_engine(target, connect_args=connect_args, **engine_options)
    _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: AsyncEngine) -> None:
    """WAL journal, and BEGIN IMMEDIATE for every write transaction (see the module docstring)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        try:
            _use_wal(cursor)
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


def _use_wal(cursor: Any) -> None:
    """Switch the file to WAL once. The switch needs the database to itself and SQLite does not
    wait for it (the busy timeout does not apply): when several processes open a new file at
    once (the Spark resend's tasks), all but one see "database is locked". The mode is stored in
    the file, so: look first, and retry the switch briefly while another connection holds it."""
    cursor.execute("PRAGMA journal_mode")
    row = cursor.fetchone()
    if row is not None and str(row[0]).lower() == "wal":
        return
    deadline = time.monotonic() + _WAL_SWITCH_TIMEOUT
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for reads only (SQLite: a deferred BEGIN that does not queue on writers)."""
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            yield await conn.execution_options(**{_READ_ONLY: True})
        else:
            yield await conn.execution_options(isolation_level="AUTOCOMMIT")


@asynccontextmanager
async def single_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for one self-contained statement.

    PostgreSQL and MySQL run it in autocommit mode (no BEGIN/COMMIT round trips: a single
    statement is atomic by itself); SQLite keeps its explicit BEGIN IMMEDIATE.
    """
    if engine.dialect.name == "sqlite":
        async with engine.begin() as conn:
            yield conn
    else:
        async with engine.connect() as conn:
            yield await conn.execution_options(isolation_level="AUTOCOMMIT")


def rowcount(result: object) -> int:
    """The rows an UPDATE or DELETE changed: what every compare-and-set decides on."""
    return cast(CursorResult[Any], result).rowcount
