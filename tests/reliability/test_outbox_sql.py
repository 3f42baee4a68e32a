"""Staging stubs in transactions the application manages itself (SQL backend only)."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, Table, create_engine, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from pocketmq.client import Message
from pocketmq.reliability import open_backend
from pocketmq.reliability.backends.memory import MemoryBackend
from pocketmq.reliability.backends.sql import SqlBackend, async_url
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


def test_async_url_mapping() -> None:
    assert async_url("sqlite:///./data/x.db") == "sqlite+aiosqlite:///./data/x.db"
    assert async_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert async_url("mysql+pymysql://root@h:3306/test") == "mysql+asyncmy://root@h:3306/test"
    assert async_url("sqlite+aiosqlite:///x") == "sqlite+aiosqlite:///x"


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
