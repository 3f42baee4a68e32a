"""The reconcile/resend rule on Spark against the plain-Python reference, edge cases included."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from pocketmq.pipeline.demo import DEMO_NOW, generate_demo_data
from pocketmq.pipeline.reconcile import (
    manual_handling,
    reconcile_lists,
    resend_candidates,
    run_reconcile,
    unsettled_stubs,
)
from pocketmq.pipeline.schemas import MESSAGE_LOG_SCHEMA, MESSAGE_STUB_SCHEMA

from .helpers import (
    T0,
    ids,
    log_df,
    log_row,
    read_rows,
    reference_lists,
    stub,
    stubs_df,
)

pytestmark = pytest.mark.spark


def lists(spark: SparkSession, stubs, log, now=T0, max_sends=5, group=None):
    s, lg = stubs_df(spark, stubs), log_df(spark, log)
    return (
        ids(resend_candidates(s, lg, now, max_sends, group=group)),
        ids(manual_handling(s, lg, now, max_sends, group=group)),
    )


def test_empty_log_only_stubs_without_offset_qualify(spark: SparkSession) -> None:
    stubs = [
        stub("stored", queue_offset=3),
        stub("never-stored", queue_offset=None, broker_name=None, queue_id=None),
        stub("unknown-null", status="UNKNOWN", queue_offset=None, broker_name=None, queue_id=None),
    ]
    assert lists(spark, stubs, []) == ({"never-stored", "unknown-null"}, set())


def test_an_id_whose_hash_collides_with_a_logged_id_is_still_resent(spark: SparkSession) -> None:
    """The log is first narrowed by a 32-bit hash of the id; only exact ids may settle a stub."""
    from pyspark.sql import functions as F

    candidates = spark.range(200_000).select(F.format_string("id-%d", "id").alias("message_id"))
    twins = (
        candidates.groupBy(F.hash("message_id").alias("h"))
        .agg(F.sort_array(F.collect_list("message_id")).alias("ids"))
        .where(F.size("ids") >= 2)
        .first()
    )
    assert twins is not None, "no 32-bit hash collision among 200k ids (expected ~4)"
    lost, received = twins["ids"][0], twins["ids"][1]
    stubs = [stub(lost, queue_offset=1), stub(received, queue_offset=2)]
    log = [log_row(received, 2), log_row("later", 5)]
    assert lists(spark, stubs, log) == ({lost}, set())


def test_all_confirmed_gives_nothing(spark: SparkSession) -> None:
    stubs = [stub(f"m{i}", status="CONFIRMED", queue_offset=i) for i in range(5)]
    log = [log_row("m4", 4)]
    assert lists(spark, stubs, log) == (set(), set())


def test_send_count_at_the_max_goes_to_manual_handling(spark: SparkSession) -> None:
    stubs = [
        stub("below", send_count=4, queue_offset=1),
        stub("at", send_count=5, queue_offset=2),
        stub("above", send_count=6, queue_offset=3),
    ]
    log = [log_row("later", 10)]
    assert lists(spark, stubs, log, max_sends=5) == ({"below"}, {"at", "above"})


def test_clock_exactly_at_next_resend_is_due(spark: SparkSession) -> None:
    stubs = [
        stub("due-now", next_resend_at=T0, queue_offset=1),
        stub("due-1us-later", next_resend_at=T0 + timedelta(microseconds=1), queue_offset=2),
        stub("overdue", next_resend_at=T0 - timedelta(hours=1), queue_offset=3),
    ]
    log = [log_row("later", 10)]
    assert lists(spark, stubs, log, now=T0) == ({"due-now", "overdue"}, set())


def test_offset_equal_to_max_logged_is_not_resent(spark: SparkSession) -> None:
    stubs = [
        stub("equal", queue_offset=10),
        stub("below", queue_offset=9),
        stub("above", queue_offset=11),
    ]
    log = [log_row("other", 10), log_row("older", 2)]
    assert lists(spark, stubs, log) == ({"below"}, set())


def test_unknown_with_null_offset_is_resent_even_with_log(spark: SparkSession) -> None:
    stubs = [
        stub("unknown", status="UNKNOWN", queue_offset=None, broker_name=None, queue_id=None),
        stub("void", status="VOID", queue_offset=None, broker_name=None, queue_id=None),
    ]
    log = [log_row("x", 100)]
    assert lists(spark, stubs, log) == ({"unknown"}, set())


def test_received_messages_are_never_resent(spark: SparkSession) -> None:
    stubs = [stub("received", queue_offset=1), stub("lost", queue_offset=2)]
    log = [log_row("received", 1, status="RECEIVED", consumed_at=None), log_row("z", 5)]
    assert lists(spark, stubs, log) == ({"lost"}, set())


def test_max_offset_is_per_queue(spark: SparkSession) -> None:
    stubs = [
        stub("q0", queue_id=0, queue_offset=5),
        stub("q1", queue_id=1, queue_offset=5),
        stub("other-broker", broker_name="broker-b", queue_id=0, queue_offset=5),
        stub("other-topic", topic="payments", queue_id=0, queue_offset=5),
    ]
    log = [log_row("a", 9, queue_id=0), log_row("b", 3, queue_id=1)]
    assert lists(spark, stubs, log) == ({"q0"}, set())


def test_group_restricts_the_log(spark: SparkSession) -> None:
    stubs = [stub("seen-by-billing", queue_offset=1), stub("seen-by-audit", queue_offset=2)]
    log = [
        log_row("seen-by-billing", 1, consumer_group="billing"),
        log_row("seen-by-audit", 2, consumer_group="audit"),
        log_row("tail", 9, consumer_group="audit"),
    ]
    # All groups: both were received by someone.
    assert lists(spark, stubs, log) == (set(), set())
    # Only "billing": its max offset is 1, so neither stub is *behind* it.
    assert lists(spark, stubs, log, group="billing") == (set(), set())
    # Only "audit": billing's receipt does not count, and audit is past offset 1.
    assert lists(spark, stubs, log, group="audit") == ({"seen-by-billing"}, set())


def test_aware_now_is_converted_to_utc(spark: SparkSession) -> None:
    stubs = [stub("due", next_resend_at=T0, queue_offset=None, broker_name=None, queue_id=None)]
    plus_two = timezone(timedelta(hours=2))
    just_before = (T0 - timedelta(seconds=1)).replace(tzinfo=UTC).astimezone(plus_two)
    at = T0.replace(tzinfo=UTC).astimezone(plus_two)
    assert lists(spark, stubs, [], now=just_before) == (set(), set())
    assert lists(spark, stubs, [], now=at) == ({"due"}, set())


def test_output_keeps_stub_columns_and_adds_max_offset(spark: SparkSession) -> None:
    stubs = [stub("lost", queue_offset=1)]
    out = unsettled_stubs(stubs_df(spark, stubs), log_df(spark, [log_row("x", 4)]), T0)
    assert out.columns[-1] == "max_logged_offset"
    row = out.collect()[0].asDict()
    assert row["max_logged_offset"] == 4
    assert {k: v for k, v in row.items() if k != "max_logged_offset"} == stubs[0]


@pytest.mark.parametrize(
    ("seed", "max_sends", "group"), [(1, 5, None), (2, 3, None), (3, 5, "billing")]
)
def test_generated_data_matches_reference(
    spark: SparkSession, tmp_path: Path, seed: int, max_sends: int, group: str | None
) -> None:
    data = generate_demo_data(tmp_path, stubs=3000, seed=seed, exports=False)
    stubs, log = read_rows(data.stubs_path), read_rows(data.log_path)
    s = spark.read.parquet(str(data.stubs_path))
    lg = spark.read.parquet(str(data.log_path))
    both = reconcile_lists(s, lg, DEMO_NOW, max_sends, group=group)
    got = {(r["message_id"], r["list"]) for r in both.select("message_id", "list").collect()}
    want_resend, want_manual = reference_lists(stubs, log, DEMO_NOW, max_sends, group)
    assert want_resend
    assert want_manual
    assert got == {(m, "resend") for m in want_resend} | {(m, "manual") for m in want_manual}


def test_run_reconcile_writes_both_lists(spark: SparkSession, tmp_path: Path) -> None:
    data = generate_demo_data(tmp_path / "in", stubs=2000, seed=5, exports=False)
    adaptive_before = spark.conf.get("spark.sql.adaptive.enabled")
    summary = run_reconcile(
        spark,
        stubs=str(data.stubs_path),
        log=str(data.log_path),
        out=str(tmp_path / "out"),
        now=DEMO_NOW,
        by_topic=True,
    )
    want_resend, want_manual = reference_lists(
        read_rows(data.stubs_path), read_rows(data.log_path), DEMO_NOW, 5
    )
    resend = pq.read_table(tmp_path / "out" / "resend")
    manual = pq.read_table(tmp_path / "out" / "manual")
    assert set(resend.column("message_id").to_pylist()) == want_resend
    assert set(manual.column("message_id").to_pylist()) == want_manual
    assert (summary.resend, summary.manual) == (len(want_resend), len(want_manual))
    topic_of = {row["message_id"]: row["topic"] for row in read_rows(data.stubs_path)}
    want_by_topic = {
        topic: (
            sum(topic_of[m] == topic for m in want_resend),
            sum(topic_of[m] == topic for m in want_manual),
        )
        for topic in {topic_of[m] for m in want_resend | want_manual}
    }
    assert {t: (r, m) for t, r, m in summary.by_topic} == want_by_topic
    assert [t for t, _, _ in summary.by_topic] == sorted(want_by_topic)
    assert "content" in resend.column_names
    assert "max_logged_offset" in resend.column_names
    # Unique ids, keys and payloads are written without min/max statistics (they prune
    # nothing); the columns a reader filters on keep theirs.
    part = next((tmp_path / "out" / "resend").glob("*.parquet"))
    chunks = pq.ParquetFile(part).metadata.row_group(0)
    stats = {
        chunks.column(i).path_in_schema: chunks.column(i).statistics
        for i in range(chunks.num_columns)
    }
    for column in ("message_id", "keys", "content"):
        assert stats[column] is None or not stats[column].has_min_max, column
    for column in ("topic", "queue_offset", "next_resend_at", "send_count"):
        assert stats[column] is not None, column
        assert stats[column].has_min_max, column
    # The job turns adaptive execution off for its write only.
    assert spark.conf.get("spark.sql.adaptive.enabled") == adaptive_before


def test_run_reconcile_writes_empty_lists_with_a_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    stubs = [stub("done", status="CONFIRMED", queue_offset=1)]
    pq.write_table(
        pa.Table.from_pylist(stubs, schema=MESSAGE_STUB_SCHEMA), tmp_path / "stubs.parquet"
    )
    pq.write_table(
        pa.Table.from_pylist([log_row("done", 1)], schema=MESSAGE_LOG_SCHEMA),
        tmp_path / "log.parquet",
    )
    summary = run_reconcile(
        spark,
        stubs=str(tmp_path / "stubs.parquet"),
        log=str(tmp_path / "log.parquet"),
        out=str(tmp_path / "out"),
        now=T0,
    )
    assert (summary.resend, summary.manual, summary.by_topic) == (0, 0, ())
    for name in ("resend", "manual"):
        table = pq.read_table(tmp_path / "out" / name)
        assert table.num_rows == 0
        assert table.column_names == [*MESSAGE_STUB_SCHEMA.names, "max_logged_offset"]
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"manual", "resend"}


_queue = st.tuples(
    st.sampled_from(["orders", "payments"]),
    st.sampled_from(["broker-a", "broker-b"]),
    st.integers(0, 1),
)


@st.composite
def _dataset(draw: st.DrawFn) -> tuple[list[dict], list[dict]]:
    """Small stub/log tables crowded around the rule's boundaries."""
    n = draw(st.integers(0, 12))
    stubs = []
    for i in range(n):
        topic, broker, queue = draw(_queue)
        stored = draw(st.booleans())
        stubs.append(
            stub(
                f"m{i}",
                topic=topic,
                status=draw(st.sampled_from(["UNCONFIRMED", "UNKNOWN", "CONFIRMED", "VOID"])),
                send_count=draw(st.integers(0, 4)),
                broker_name=broker if stored else None,
                queue_id=queue if stored else None,
                queue_offset=draw(st.integers(0, 4)) if stored else None,
                next_resend_at=T0 + timedelta(microseconds=draw(st.integers(-2, 2))),
            )
        )
    log = []
    for j, group in enumerate(draw(st.lists(st.sampled_from(["billing", "audit"]), max_size=8))):
        topic, broker, queue = draw(_queue)
        mid = draw(st.sampled_from([f"m{i}" for i in range(n)] + [f"x{j}"]))
        log.append(
            log_row(
                mid,
                draw(st.integers(0, 4)),
                consumer_group=group,
                topic=topic,
                broker_name=broker,
                queue_id=queue,
            )
        )
    unique = {(r["consumer_group"], r["message_id"]): r for r in log}  # UNIQUE(group, message_id)
    return stubs, list(unique.values())


@settings(max_examples=15, deadline=None)
@given(data=_dataset(), max_sends=st.integers(1, 4), group=st.sampled_from([None, "billing"]))
def test_rule_matches_reference_on_random_tables(
    spark: SparkSession, data, max_sends: int, group: str | None
) -> None:
    stubs, log = data
    s, lg = stubs_df(spark, stubs), log_df(spark, log)
    both = reconcile_lists(s, lg, T0, max_sends, group=group)
    got = {(r["message_id"], r["list"]) for r in both.select("message_id", "list").collect()}
    resend, manual = reference_lists(stubs, log, T0, max_sends, group)
    assert got == {(m, "resend") for m in resend} | {(m, "manual") for m in manual}


class _FakeConf:
    def __init__(self) -> None:
        self.values = {"spark.sql.adaptive.enabled": "true"}

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _FakeSession:
    def __init__(self) -> None:
        self.conf = _FakeConf()


def test_overlapping_runs_share_the_adaptive_switch() -> None:
    from pocketmq.pipeline.reconcile import _adaptive_execution_off

    session = _FakeSession()
    key = "spark.sql.adaptive.enabled"
    first, second = _adaptive_execution_off(session), _adaptive_execution_off(session)  # type: ignore[arg-type]
    first.__enter__()
    assert session.conf.values[key] == "false"
    second.__enter__()
    first.__exit__(None, None, None)
    assert session.conf.values[key] == "false"  # the second run is still writing
    second.__exit__(None, None, None)
    assert session.conf.values[key] == "true"
    with pytest.raises(RuntimeError), _adaptive_execution_off(session):  # type: ignore[arg-type]
        raise RuntimeError("the write failed")
    assert session.conf.values[key] == "true"
