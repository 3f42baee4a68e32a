"""Fixtures for the reliability toolkit: one backend fixture over every storage kind.

Every SQL test gets its own table prefix and drops its tables afterwards, so tests never see each
other's rows (PostgreSQL and MariaDB use the shared ``test`` database). Redis tests get a unique
key prefix. Services come from ``pocketmq.testing.services``: missing ones fail under CI and skip
locally.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.backends.memory import MemoryBackend
from pocketmq.reliability.backends.sql import SqlBackend
from pocketmq.reliability.clock import FakeClock
from pocketmq.testing.services import require_service

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
REDIS_URL = "redis://127.0.0.1:6379/0"

BACKEND_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]
SQL_KINDS = BACKEND_KINDS[1:]

START = datetime(2026, 11, 22, 12, 0, 0)


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}_"


def sql_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/reliability.db"
    if kind == "postgres":
        require_service("postgres")
        return PG_URL
    if kind == "mariadb":
        require_service("mariadb")
        return MARIADB_URL
    raise AssertionError(kind)


async def open_test_backend(
    kind: str, clock: FakeClock, tmp_path: Path, **options: Any
) -> ReliabilityBackend[Any]:
    if kind == "memory":
        return MemoryBackend(clock=clock)
    backend = SqlBackend.from_url(
        sql_url(kind, tmp_path), table_prefix=unique_prefix(), clock=clock, **options
    )
    await backend.create_schema()
    return backend


async def close_test_backend(backend: ReliabilityBackend[Any]) -> None:
    if isinstance(backend, SqlBackend):
        await backend.drop_schema()
    await backend.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture(params=BACKEND_KINDS)
async def backend(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[ReliabilityBackend[Any]]:
    store = await open_test_backend(request.param, clock, tmp_path)
    try:
        yield store
    finally:
        await close_test_backend(store)


@pytest.fixture(params=SQL_KINDS)
async def sql_backend(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[SqlBackend]:
    store = await open_test_backend(request.param, clock, tmp_path)
    assert isinstance(store, SqlBackend)
    try:
        yield store
    finally:
        await close_test_backend(store)


@pytest.fixture
async def redis_client() -> AsyncIterator[Any]:
    require_service("redis")
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def redis_prefix() -> str:
    return f"pocketmq-test:{uuid.uuid4().hex[:12]}:idem:"
