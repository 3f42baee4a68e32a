"""Reading the reliability tables over JDBC: SQLite, PostgreSQL and MariaDB, end to end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from pyspark.sql import SparkSession

from pocketmq.errors import InvalidArgumentError
from pocketmq.pipeline.io import is_database_url, jdbc_source, read_table
from pocketmq.pipeline.reconcile import run_reconcile
from pocketmq.pipeline.schemas import MESSAGE_LOG_SCHEMA, MESSAGE_STUB_SCHEMA
from pocketmq.testing.services import require_service

from .helpers import T0, log_row, reference_lists, stub, tables

STUBS = [
    stub("lost", queue_offset=3),
    stub("at-max-offset", queue_offset=9),
    stub("received", queue_offset=4),
    stub("never-stored", status="UNKNOWN", queue_offset=None, broker_name=None, queue_id=None),
    stub("exhausted", queue_offset=2, send_count=5),
    stub("boundary", queue_offset=1, next_resend_at=T0),
    stub("not-due", queue_offset=1, next_resend_at=T0 + timedelta(microseconds=1)),
    stub("confirmed", status="CONFIRMED", queue_offset=5),
    stub("void", status="VOID", queue_offset=6),
    stub("other-queue", queue_id=3, queue_offset=1),
]
LOG = [
    log_row("received", 4, status="RECEIVED", consumed_at=None),
    log_row("confirmed", 5),
    log_row("tail", 9, consumer_group="audit"),
]


EVERY_DATABASE = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    kind = request.param
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'outbox.db'}"
    elif kind == "postgres":
        require_service("postgres")
        url = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    else:
        require_service("mariadb")
        url = "mysql+pymysql://root@127.0.0.1:3306/test"
    engine = sa.create_engine(url)
    md, stub_t, log_t = tables(uuid.uuid4().hex[:8])
    md.create_all(engine)
    with engine.begin() as conn:
        conn.execute(stub_t.insert(), STUBS)
        conn.execute(log_t.insert(), LOG)
    try:
        yield url, stub_t.name, log_t.name
    finally:
        md.drop_all(engine)
        engine.dispose()


@pytest.mark.spark
@pytest.mark.parametrize("database", EVERY_DATABASE, indirect=True)
def test_reconcile_over_jdbc_matches_reference(
    spark: SparkSession, database: tuple[str, str, str], tmp_path: Path
) -> None:
    url, stub_table, log_table = database
    out = tmp_path / "out"
    summary = run_reconcile(
        spark,
        stubs=url,
        log=url,
        out=str(out),
        now=T0,
        stubs_table=stub_table,
        log_table=log_table,
    )
    want_resend, want_manual = reference_lists(STUBS, LOG, T0, 5)
    assert want_resend == {
        "lost",
        "never-stored",
        "boundary",
    }
    assert want_manual == {"exhausted"}
    resend = pq.read_table(out / "resend").to_pylist()
    assert {r["message_id"] for r in resend} == want_resend
    assert {r["message_id"] for r in pq.read_table(out / "manual").to_pylist()} == want_manual
    assert (summary.resend, summary.manual) == (3, 1)
    # Values survive the trip through the database with their contract types.
    lost = next(r for r in resend if r["message_id"] == "lost")
    expected = {k: v for k, v in STUBS[0].items()}
    assert {k: lost[k] for k in expected} == expected
    assert lost["max_logged_offset"] == 9


@pytest.mark.spark
@pytest.mark.parametrize("database", EVERY_DATABASE, indirect=True)
def test_reconcile_over_jdbc_with_an_empty_log(
    spark: SparkSession, database: tuple[str, str, str], tmp_path: Path
) -> None:
    """A new deployment has no receipts yet. SQLite answered MIN()/MAX() of the empty table
    with a NULL Spark could not read ("column -1 out of bounds"): the job failed."""
    url, stub_table, log_table = database
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {log_table}"))
    engine.dispose()
    summary = run_reconcile(
        spark,
        stubs=url,
        log=url,
        out=str(tmp_path / "out"),
        now=T0,
        stubs_table=stub_table,
        log_table=log_table,
    )
    want_resend, want_manual = reference_lists(STUBS, [], T0, 5)
    assert want_resend == {"never-stored"}  # with no log, only stubs without an offset qualify
    got = {r["message_id"] for r in pq.read_table(tmp_path / "out" / "resend").to_pylist()}
    assert got == want_resend
    assert (summary.resend, summary.manual) == (len(want_resend), len(want_manual))


@pytest.mark.spark
@pytest.mark.parametrize("database", EVERY_DATABASE, indirect=True)
def test_read_table_conforms_types(spark: SparkSession, database: tuple[str, str, str]) -> None:
    url, stub_table, log_table = database
    stubs = read_table(
        spark,
        url,
        table=stub_table,
        schema=MESSAGE_STUB_SCHEMA,
        partition_column="queue_offset",
        num_partitions=3,
    )
    log = read_table(spark, url, table=log_table, schema=MESSAGE_LOG_SCHEMA)
    types = dict(stubs.dtypes)
    assert types["queue_offset"] == "bigint"
    assert types["queue_id"] == "int"
    assert types["next_resend_at"] == "timestamp_ntz"
    assert types["content"] == "binary"
    assert stubs.count() == len(STUBS)  # the NULL offsets land in the first range
    assert stubs.rdd.getNumPartitions() == 3
    assert dict(log.dtypes)["consumed_at"] == "timestamp_ntz"
    assert sorted(log.columns) == sorted(MESSAGE_LOG_SCHEMA.names)


@pytest.mark.parametrize(
    ("url", "jdbc", "user", "password"),
    [
        (
            "postgresql://app:p%40ss@db:6432/orders",
            "jdbc:postgresql://db:6432/orders",
            "app",
            "p@ss",
        ),
        (
            "postgresql+psycopg://127.0.0.1/test?sslmode=require",
            "jdbc:postgresql://127.0.0.1:5432/test?sslmode=require",
            None,
            None,
        ),
        ("postgres://u@h/d", "jdbc:postgresql://h:5432/d", "u", None),
        (
            "mysql+pymysql://root:@localhost/test?charset=utf8mb4",
            "jdbc:mysql://localhost:3306/test",
            "root",
            "",
        ),
        ("mariadb://root@db:3307/shop", "jdbc:mysql://db:3307/shop", "root", None),
        ("sqlite:///relative/outbox.db", "jdbc:sqlite:relative/outbox.db", None, None),
        ("sqlite:////var/lib/outbox.db", "jdbc:sqlite:/var/lib/outbox.db", None, None),
        ("jdbc:postgresql://h/d", "jdbc:postgresql://h/d", None, None),
    ],
)
def test_sqlalchemy_urls_become_jdbc_urls(
    url: str, jdbc: str, user: str | None, password: str | None
) -> None:
    source = jdbc_source(url)
    assert (source.url, source.user, source.password) == (jdbc, user, password)
    assert source.options()["driver"]
    assert is_database_url(url)
    assert password is None or password not in repr(source) or password == ""


@pytest.mark.parametrize(
    "url", ["sqlite://", "oracle://h/d", "jdbc:oracle:thin:@h:1521:x", "/data/stubs"]
)
def test_unsupported_urls_are_rejected(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        jdbc_source(url)


def test_paths_are_not_database_urls() -> None:
    assert not is_database_url("/data/stubs")
    assert not is_database_url("s3a://bucket/stubs")
    assert not is_database_url("stubs.parquet")
