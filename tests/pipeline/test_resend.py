"""Resending the resend list with the toolkit's claim: no double send on a re-run, stub updates
through the toolkit's backend on SQLite and PostgreSQL, and from Spark workers."""

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

import pocketmq.pipeline
import pocketmq.reliability
from pocketmq.client import Message, SendResult
from pocketmq.errors import InvalidArgumentError, SendOutcomeUnknownError, TooManyRequestsError
from pocketmq.pipeline.reconcile import DEFAULT_MAX_SENDS, resend_candidates, run_reconcile
from pocketmq.pipeline.resend import ResendOutcome, open_stub_backend, resend_stubs, run_resend
from pocketmq.reliability import (
    FakeClock,
    InMemorySender,
    MemoryBackend,
    MessageStub,
    ResendPolicy,
    StubStatus,
)

from . import senders
from .helpers import T0, log_row, read_rows, stub, tables

cloudpickle.register_pickle_by_value(senders)


def pending(n: int) -> list[MessageStub]:
    return [
        MessageStub.from_row(
            stub(f"m{i}", queue_offset=i, send_count=1 + i % 3, content=f"body-{i}".encode())
        )
        for i in range(n)
    ]


def memory_backend(stubs: list[MessageStub]) -> MemoryBackend:
    backend = MemoryBackend(clock=FakeClock(T0))
    backend.load_stubs(stubs)
    return backend


async def current(backend: MemoryBackend, message_id: str) -> MessageStub:
    found = await backend.get_stub(message_id)
    assert found is not None
    return found


def test_the_pipeline_uses_the_toolkits_types() -> None:
    """One MessageSender, ResendPolicy and InMemorySender: the pipeline re-exports, not copies."""
    for name in ("MessageSender", "ResendPolicy", "InMemorySender"):
        assert getattr(pocketmq.pipeline, name) is getattr(pocketmq.reliability, name)
    assert ResendPolicy().max_sends == DEFAULT_MAX_SENDS


async def test_resend_claims_sends_and_records() -> None:
    selected = pending(5)  # the resend list, as selected at T0
    backend = memory_backend(selected)
    sender = InMemorySender()
    policy = ResendPolicy(base_interval=10, max_interval=25)
    outcome = await resend_stubs(selected, sender, backend, policy=policy)
    assert outcome == ResendOutcome(sent=5)
    assert [m.message_id for m in sender.messages] == [f"m{i}" for i in range(5)]
    for i in range(5):
        s = await current(backend, f"m{i}")
        assert s.send_count == 2 + i % 3
        assert s.broker_name == "memory-broker"
        assert s.next_resend_at == T0 + timedelta(seconds=min(25, 10 * 2 ** (1 + i % 3)))
        assert s.updated_at == T0

    # The same selection again (a re-run, a retried task): every claim fails, nothing is sent.
    again = await resend_stubs(selected, sender, backend, policy=policy)
    assert (again.sent, again.skipped) == (0, 5)
    assert len(sender.sent) == 5


async def test_a_stub_the_relay_is_sending_is_skipped() -> None:
    """The toolkit's relay claims a stub by moving next_resend_at on, not its send count."""
    selected = pending(2)
    backend = memory_backend(selected)
    relay_claim = T0 + timedelta(seconds=30)
    assert await backend.claim_stub(selected[0], until=relay_claim, now=T0)
    sender = InMemorySender()
    outcome = await resend_stubs(selected, sender, backend)
    assert (outcome.sent, outcome.skipped) == (1, 1)
    assert [m.message_id for m in sender.messages] == ["m1"]
    assert (await current(backend, "m0")).send_count == selected[0].send_count


async def test_failures_are_recorded_and_unknown_outcomes_marked() -> None:
    selected = pending(3)
    backend = memory_backend(selected)
    sender = InMemorySender(
        fail={
            "m0": SendOutcomeUnknownError("timed out", message_id="m0"),
            "m1": TooManyRequestsError("busy"),
        }
    )
    outcome = await resend_stubs(selected, sender, backend)
    assert (outcome.sent, outcome.failed, outcome.unknown) == (1, 1, 1)
    assert outcome.errors == (
        "m0: SendOutcomeUnknownError: timed out",
        "m1: TooManyRequestsError: busy",
    )
    m0, m1 = await current(backend, "m0"), await current(backend, "m1")
    assert m0.status is StubStatus.UNKNOWN
    assert m1.status is StubStatus.UNCONFIRMED
    assert m1.last_error is not None
    assert "TooManyRequestsError" in m1.last_error
    assert m0.send_count == 2  # a failed send counts, so a hopeless stub ends in manual handling


async def test_a_confirmation_during_the_send_is_not_overwritten() -> None:
    (selected,) = pending(1)
    backend = memory_backend([selected])

    class ConfirmingSender(InMemorySender):
        async def send(self, message: Message) -> SendResult:
            async with backend.transaction() as tx:  # the consumer confirms meanwhile
                await tx.confirm_stub("m0", T0)
            return await super().send(message)

    await resend_stubs([selected], ConfirmingSender(), backend)
    assert (await current(backend, "m0")).status is StubStatus.CONFIRMED
    # and a confirmed stub is settled: the same list again sends nothing
    assert (await resend_stubs([selected], InMemorySender(), backend)).skipped == 1


def test_outcomes_of_partitions_add_up() -> None:
    one = ResendOutcome(sent=1, errors=tuple(f"a{i}" for i in range(15)))
    two = ResendOutcome(skipped=2, failed=1, unknown=3, errors=tuple(f"b{i}" for i in range(15)))
    total = sum([one, two], ResendOutcome())
    assert (total.sent, total.skipped, total.failed, total.unknown) == (1, 2, 1, 3)
    assert len(total.errors) == 20  # the driver gets a few examples, not every error


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


async def test_the_toolkits_backend_claims_each_selection_once(
    stub_db: tuple[str, str, str],
) -> None:
    """The backend the workers open on the pipeline's stub table (any name, as --stubs-table)."""
    url, table, _ = stub_db
    load(url, table, [stub("a", send_count=2), stub("b", status="CONFIRMED")])
    selected = [MessageStub.from_row(row) for row in fetch(url, table).values()]
    selected.append(MessageStub.from_row(stub("gone")))
    backend = open_stub_backend(url, table, FakeClock(T0))
    sender = InMemorySender(broker_name="b9")
    try:
        outcome = await resend_stubs(selected, sender, backend)
        assert (outcome.sent, outcome.skipped) == (1, 2)  # settled and missing ones skipped
        again = await resend_stubs(selected, sender, backend)
        assert (again.sent, again.skipped) == (0, 3)  # the count and resend time moved on
    finally:
        await backend.aclose()
    row = fetch(url, table)["a"]
    assert (row["send_count"], row["broker_name"], row["updated_at"]) == (3, "b9", T0)
    assert row["next_resend_at"] == T0 + timedelta(seconds=ResendPolicy().interval(3))
    assert [m.message_id for m in sender.messages] == ["a"]


@pytest.mark.spark
def test_a_jdbc_stub_database_is_refused_before_spark_runs(spark: SparkSession) -> None:
    empty = spark.createDataFrame([], "message_id STRING")
    with pytest.raises(InvalidArgumentError, match="SQLAlchemy"):
        run_resend(empty, sender_factory=InMemorySender, stub_db="jdbc:postgresql://h/db")


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
