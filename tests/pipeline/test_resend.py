"""Resending: claim before send, no double send on a re-run, stub updates on SQLite/PostgreSQL."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from pocketmq.client import Message
from pocketmq.errors import InvalidArgumentError, SendOutcomeUnknownError, TooManyRequestsError
from pocketmq.pipeline.reconcile import resend_candidates, run_reconcile
from pocketmq.pipeline.resend import (
    InMemorySender,
    InMemoryStubStore,
    MessageSender,
    ResendPolicy,
    SqlStubStore,
    message_from_stub,
    resend_rows,
    run_resend,
    sync_url,
)

from . import senders
from .helpers import T0, log_row, read_rows, stub, tables

cloudpickle.register_pickle_by_value(senders)


def pending(n: int) -> dict[str, dict[str, Any]]:
    return {
        f"m{i}": stub(f"m{i}", queue_offset=i, send_count=1 + i % 3, content=f"body-{i}".encode())
        for i in range(n)
    }


def test_message_from_stub_keeps_id_keys_and_tag() -> None:
    msg = message_from_stub(stub("id-1", keys="order-1 customer-9", tag="paid", content=b"x"))
    assert msg == Message(
        topic="orders", body=b"x", tag="paid", keys=("order-1", "customer-9"), message_id="id-1"
    )
    assert message_from_stub(stub("id-2", keys=None)).keys == ()


def test_in_memory_sender_satisfies_the_protocol() -> None:
    assert isinstance(InMemorySender(), MessageSender)


async def test_resend_claims_sends_and_records() -> None:
    store = InMemoryStubStore(pending(5))
    rows = [dict(s) for s in store.stubs.values()]
    sender = InMemorySender()
    policy = ResendPolicy(base_delay=10, max_delay=25)
    outcome = await resend_rows(rows, sender, store, now=T0, policy=policy)
    assert (outcome.sent, outcome.skipped, outcome.failed, outcome.unknown) == (5, 0, 0, 0)
    assert [m.message_id for m in sender.sent] == [f"m{i}" for i in range(5)]
    for i, s in enumerate(store.stubs.values()):
        assert s["send_count"] == 2 + i % 3
        assert s["broker_name"] == "broker-mem"
        assert s["next_resend_at"] == T0 + timedelta(seconds=min(25, 10 * 2 ** (1 + i % 3)))
        assert s["updated_at"] == T0

    # The same selection again (a re-run, a retried task): every claim fails, nothing is sent.
    again = await resend_rows(rows, sender, store, now=T0, policy=policy)
    assert (again.sent, again.skipped) == (0, 5)
    assert len(sender.sent) == 5


async def test_a_stub_the_relay_is_sending_is_skipped() -> None:
    """The toolkit's relay claims a stub by moving next_resend_at on, not its send count."""
    store = InMemoryStubStore(pending(2))
    rows = [dict(s) for s in store.stubs.values()]  # the resend list, selected at T0
    store.stubs["m0"]["next_resend_at"] = T0 + timedelta(seconds=30)  # the relay's claim
    sender = InMemorySender()
    outcome = await resend_rows(rows, sender, store, now=T0)
    assert (outcome.sent, outcome.skipped) == (1, 1)
    assert [m.message_id for m in sender.sent] == ["m1"]
    assert store.stubs["m0"]["send_count"] == rows[0]["send_count"]


def test_sync_url_picks_the_installed_drivers() -> None:
    assert sync_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert sync_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert sync_url("mysql://root@h/test") == "mysql+pymysql://root@h/test"
    assert sync_url("mariadb://root@h/test") == "mysql+pymysql://root@h/test"
    assert sync_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"
    assert sync_url("sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(InvalidArgumentError, match="SQLAlchemy"):
        sync_url("jdbc:postgresql://h/db")


async def test_failures_are_recorded_and_unknown_outcomes_marked() -> None:
    store = InMemoryStubStore(pending(3))
    sender = InMemorySender(
        fail={
            "m0": SendOutcomeUnknownError("timed out", message_id="m0"),
            "m1": TooManyRequestsError("busy"),
        }
    )
    outcome = await resend_rows(list(store.stubs.values()), sender, store, now=T0)
    assert (outcome.sent, outcome.failed, outcome.unknown) == (1, 1, 1)
    assert store.stubs["m0"]["status"] == "UNKNOWN"
    assert store.stubs["m1"]["status"] == "UNCONFIRMED"
    assert "TooManyRequestsError" in store.stubs["m1"]["last_error"]
    assert store.stubs["m0"]["send_count"] == 2  # the claim counts as a send attempt


async def test_a_confirmation_during_the_send_is_not_overwritten() -> None:
    store = InMemoryStubStore(pending(1))

    class ConfirmingSender(InMemorySender):
        async def send(self, message: Message) -> Any:
            store.stubs["m0"]["status"] = "CONFIRMED"  # the consumer confirmed meanwhile
            return await super().send(message)

    await resend_rows([dict(store.stubs["m0"])], ConfirmingSender(), store, now=T0)
    assert store.stubs["m0"]["status"] == "CONFIRMED"
    assert store.stubs["m0"]["broker_name"] == "broker-a"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stub_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'outbox.db'}"
    else:
        from pocketmq.testing.services import require_service

        require_service("postgres")
        url = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    engine = sa.create_engine(url)
    md, stub_t, log_t = tables(uuid.uuid4().hex[:8])
    md.create_all(engine)
    try:
        yield url, stub_t.name, log_t.name
    finally:
        md.drop_all(engine)
        engine.dispose()


def load(
    url: str,
    table: str,
    stubs: list[dict[str, Any]],
    log_table: str | None = None,
    log: list[dict[str, Any]] | None = None,
) -> None:
    engine = sa.create_engine(url)
    md = sa.MetaData()
    t = sa.Table(table, md, autoload_with=engine)
    with engine.begin() as conn:
        conn.execute(t.insert(), stubs)
        if log_table and log:
            conn.execute(sa.Table(log_table, md, autoload_with=engine).insert(), log)
    engine.dispose()


def fetch(url: str, table: str) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(url)
    t = sa.Table(table, sa.MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        rows = {r.message_id: dict(r._mapping) for r in conn.execute(sa.select(t))}
    engine.dispose()
    return rows


def test_sql_store_claims_once(stub_db: tuple[str, str, str]) -> None:
    url, table, _ = stub_db
    load(url, table, [stub("a", send_count=2), stub("b", status="CONFIRMED")])
    store = SqlStubStore(url, table)
    later = T0 + timedelta(minutes=4)
    assert store.claim("a", 2, T0, now=T0, next_resend_at=later)
    assert not store.claim("a", 2, T0, now=T0, next_resend_at=later)  # count moved on
    assert not store.claim("a", 3, T0, now=T0, next_resend_at=later)  # resend time moved on
    assert not store.claim("b", 1, T0, now=T0, next_resend_at=later)  # settled
    assert not store.claim("nope", 1, T0, now=T0, next_resend_at=later)
    from pocketmq.client import SendResult

    store.record_sent(
        "a",
        3,
        SendResult(message_id="a", topic="orders", queue_id=5, queue_offset=77, broker_name="b9"),
        now=T0,
    )
    store.record_sent(  # a late writer from an older claim changes nothing
        "a",
        2,
        SendResult(message_id="a", topic="orders", queue_id=1, queue_offset=1, broker_name="stale"),
        now=T0,
    )
    store.close()
    row = fetch(url, table)["a"]
    assert (row["send_count"], row["queue_id"], row["queue_offset"], row["broker_name"]) == (
        3,
        5,
        77,
        "b9",
    )
    assert row["next_resend_at"] == later


def test_sqlite_claim_compares_instants_not_text(tmp_path: Path) -> None:
    """A stub row written by another SQLite client, without fractional seconds, is claimable."""
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = sa.create_engine(url)
    md, stub_t, _ = tables("raw")
    md.create_all(engine)
    with engine.begin() as conn:
        conn.execute(stub_t.insert(), [stub("a")])
        conn.execute(sa.text(f"UPDATE {stub_t.name} SET next_resend_at = '2026-11-22 12:00:00'"))
        assert conn.execute(sa.text(f"SELECT next_resend_at FROM {stub_t.name}")).scalar() == (
            "2026-11-22 12:00:00"
        )
    engine.dispose()
    store = SqlStubStore(url, stub_t.name)
    later = T0 + timedelta(minutes=4)
    assert not store.claim("a", 1, T0 + timedelta(seconds=1), now=T0, next_resend_at=later)
    assert store.claim("a", 1, T0, now=T0, next_resend_at=later)
    store.close()


@pytest.mark.spark
def test_spark_resend_from_the_resend_list_is_idempotent(
    spark: SparkSession, stub_db: tuple[str, str, str], tmp_path: Path
) -> None:
    url, table, log_table = stub_db
    stubs = [stub(f"lost-{i}", queue_offset=i, content=f"b{i}".encode()) for i in range(6)]
    stubs += [stub("unknown", status="UNKNOWN", queue_offset=None, broker_name=None, queue_id=None)]
    stubs += [stub("done", status="CONFIRMED", queue_offset=8)]
    load(url, table, stubs, log_table, [log_row("done", 8)])
    summary = run_reconcile(
        spark,
        stubs=url,
        log=url,
        out=str(tmp_path / "out"),
        now=T0,
        stubs_table=table,
        log_table=log_table,
    )
    assert summary.resend == 7
    resend_list = spark.read.parquet(summary.resend_path).repartition(3)

    record = str(tmp_path / "sent.jsonl")
    factory = functools.partial(senders.FileRecordingSender, record, ("unknown",))
    outcome = run_resend(resend_list, sender_factory=factory, stub_db=url, table=table, now=T0)
    assert (outcome.sent, outcome.unknown, outcome.skipped) == (6, 1, 0)
    assert sorted(senders.recorded(record)) == sorted(f"lost-{i}" for i in range(6))

    # Running the same list again sends nothing: every stub's count has moved on.
    again = run_resend(resend_list, sender_factory=factory, stub_db=url, table=table, now=T0)
    assert (again.sent, again.skipped) == (0, 7)
    assert len(senders.recorded(record)) == 6

    rows = fetch(url, table)
    assert rows["lost-0"]["broker_name"] == "broker-z"
    assert rows["lost-0"]["queue_id"] == 7
    assert rows["lost-0"]["send_count"] == 2
    assert rows["unknown"]["status"] == "UNKNOWN"
    assert rows["done"]["send_count"] == 1
    # And the resent stubs are no longer due at the same instant.
    s = spark.read.parquet(summary.resend_path)
    assert read_rows(summary.resend_path)  # the list itself is unchanged
    from pocketmq.pipeline.io import read_table
    from pocketmq.pipeline.schemas import MESSAGE_LOG_SCHEMA, MESSAGE_STUB_SCHEMA

    fresh = read_table(spark, url, table=table, schema=MESSAGE_STUB_SCHEMA)
    log = read_table(spark, url, table=log_table, schema=MESSAGE_LOG_SCHEMA)
    assert resend_candidates(fresh, log, T0).count() == 0
    assert s.count() == 7
