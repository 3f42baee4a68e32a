"""Staging stubs in transactions the application manages itself (SQL backend only)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import Column, Integer, MetaData, Table, create_engine, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from pocketmq.client import Message
from pocketmq.reliability import open_backend
from pocketmq.reliability.backends.memory import MemoryBackend
from pocketmq.reliability.backends.sql import SqlBackend
from pocketmq.reliability.stub import StubStatus


def business_table(backend: SqlBackend) -> tuple[MetaData, Table]:
    metadata = MetaData()
    table = Table(
        f"{backend.tables.stub.name}_biz", metadata, Column("id", Integer, primary_key=True)
    )
    return metadata, table


async def test_add_message_in_the_callers_async_transaction(sql_backend: SqlBackend) -> None:
    metadata, orders = business_table(sql_backend)
    async with sql_backend.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        async with sql_backend.engine.connect() as conn:
            async with conn.begin():
                await conn.execute(orders.insert().values(id=1))
                kept = await sql_backend.add_message(conn, Message(topic="t", body=b"kept"))
            transaction = await conn.begin()
            await conn.execute(orders.insert().values(id=2))
            lost = await sql_backend.add_message(conn, Message(topic="t", body=b"lost"))
            await transaction.rollback()
        async with AsyncSession(sql_backend.engine) as session, session.begin():
            orm = await sql_backend.add_message(session, Message(topic="t", body=b"orm"))
        assert kept.message_id is not None
        assert lost.message_id is not None
        assert orm.message_id is not None
        assert await sql_backend.stub_status(kept.message_id) is StubStatus.UNCONFIRMED
        assert await sql_backend.stub_status(lost.message_id) is None
        assert await sql_backend.stub_status(orm.message_id) is StubStatus.UNCONFIRMED
    finally:
        async with sql_backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)


async def test_stub_insert_in_a_sync_session(sql_backend: SqlBackend) -> None:
    """Code on a synchronous SQLAlchemy engine executes the returned INSERT itself."""
    metadata, orders = business_table(sql_backend)
    url = sql_backend.engine.url.render_as_string(hide_password=False)
    sync_url = (
        url.replace("+aiosqlite", "").replace("+asyncmy", "+pymysql")  # psycopg is both
    )
    engine = create_engine(sync_url)
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(orders.insert().values(id=7))
            message, statement = sql_backend.stub_insert(Message(topic="t", body=b"sync"))
            conn.execute(statement)
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(orders)) == 1
        assert message.message_id is not None
        stub = await sql_backend.get_stub(message.message_id)
        assert stub is not None
        assert stub.content == b"sync"
    finally:
        metadata.drop_all(engine)
        engine.dispose()


async def test_open_backend(tmp_path: object) -> None:
    memory = open_backend("memory://")
    assert isinstance(memory, MemoryBackend)
    sql = open_backend(f"sqlite:///{tmp_path}/open.db", table_prefix="p_")
    try:
        assert isinstance(sql, SqlBackend)
        assert sql.tables.stub.name == "p_message_stub"
        await sql.create_schema()
        await sql.create_schema()  # idempotent
    finally:
        await sql.aclose()


async def test_tables_can_be_named_outright(tmp_path: object) -> None:
    """A database whose stub table someone else named (the pipeline's ``--stubs-table``)."""
    backend = SqlBackend.from_url(
        f"sqlite:///{tmp_path}/named.db", stub_table="outbox_stubs", log_table="receipts"
    )
    try:
        assert (backend.tables.stub.name, backend.tables.log.name) == ("outbox_stubs", "receipts")
        await backend.create_schema()
        async with backend.transaction() as tx:
            message = tx.add_message(Message(topic="t", body=b"x"))
        assert message.message_id is not None
        assert await backend.stub_status(message.message_id) is StubStatus.UNCONFIRMED
    finally:
        await backend.aclose()


async def test_sqlite_claim_compares_instants_not_text(tmp_path: object) -> None:
    """A stub row another SQLite client wrote, without fractional seconds, can be claimed."""
    backend = SqlBackend.from_url(f"sqlite:///{tmp_path}/raw.db")
    try:
        await backend.create_schema()
        async with backend.transaction() as tx:
            message = tx.add_message(Message(topic="t", body=b"x"))
        assert message.message_id is not None
        stub_table = backend.tables.stub.name
        async with backend.engine.begin() as conn:
            await conn.execute(
                text(f"UPDATE {stub_table} SET next_resend_at = '2026-11-22 12:00:00'")
            )
        stub = await backend.get_stub(message.message_id)
        assert stub is not None
        assert stub.next_resend_at == datetime(2026, 11, 22, 12, 0, 0)
        later = stub.next_resend_at + timedelta(seconds=30)
        moved = replace(stub, next_resend_at=stub.next_resend_at + timedelta(seconds=1))
        assert not await backend.claim_stub(moved, until=later, now=later)
        assert await backend.claim_stub(stub, until=later, now=later)
        assert not await backend.claim_stub(stub, until=later, now=later)  # taken now
    finally:
        await backend.aclose()
