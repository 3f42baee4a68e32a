"""Delivery audit against a plain-Python reference, on generated data and on edge cases."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from pocketmq.pipeline.audit import delivery_audit, run_audit
from pocketmq.pipeline.demo import DEMO_NOW, generate_demo_data
from pocketmq.pipeline.schemas import MESSAGE_LOG_SCHEMA, TOPIC_EXPORT_SCHEMA

from .helpers import T0, arrow_df, log_row, read_rows

pytestmark = pytest.mark.spark

Row = dict[str, Any]


def naive(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


def reference_audit(
    export: Iterable[Row],
    log: Iterable[Row],
    now: datetime,
    late_after: float,
    grace: float,
    groups: list[str] | None = None,
    subscriptions: Iterable[tuple[str, str]] = (),
) -> dict[str, set[tuple[str, str, str]]]:
    stored: dict[tuple[str, str], tuple[datetime, int]] = {}
    for r in export:
        if r["topic"].startswith(("%RETRY%", "%DLQ%")):
            continue
        key = (r["topic"], r["message_id"])
        at = naive(r["store_timestamp"])
        prev = stored.get(key)
        stored[key] = (min(at, prev[0]), prev[1] + 1) if prev else (at, 1)
    logged = [r for r in log if groups is None or r["consumer_group"] in groups]
    pairs = {(r["topic"], r["consumer_group"]) for r in logged}
    pairs |= {(t, g) for t, g in subscriptions if groups is None or g in groups}
    receipts = {(r["consumer_group"], r["message_id"]): r for r in logged}
    out: dict[str, set[tuple[str, str, str]]] = {
        k: set() for k in ("lost", "duplicated", "late", "stored", "dup_stores")
    }
    for (topic, mid), (at, copies) in stored.items():
        for t, group in pairs:
            if t != topic:
                continue
            key = (topic, group, mid)
            out["stored"].add(key)
            rec = receipts.get((group, mid))
            consumed = rec is not None and rec["status"] == "CONSUMED"
            if not consumed and at <= now - timedelta(seconds=grace):
                out["lost"].add(key)
            if rec is not None and rec["receive_count"] > 1:
                out["duplicated"].add(key)
            if consumed and (rec["consumed_at"] - at).total_seconds() > late_after:
                out["late"].add(key)
            if copies > 1:
                out["dup_stores"].add(key)
    return out


def keys(df) -> set[tuple[str, str, str]]:
    return {(r["topic"], r["consumer_group"], r["message_id"]) for r in df.collect()}


def export_row(message_id: str, stored: datetime, **fields: Any) -> Row:
    row: Row = {
        "message_id": message_id,
        "topic": "orders",
        "queue_id": 0,
        "queue_offset": 0,
        "body": b"{}",
        "tag": None,
        "keys": None,
        "message_group": None,
        "delivery_attempt": 1,
        "born_timestamp": stored.replace(tzinfo=UTC),
        "store_timestamp": stored.replace(tzinfo=UTC),
        "properties": [],
        "broker_name": "broker-a",
        "date": stored.strftime("%Y-%m-%d"),
    }
    row.update(fields)
    return row


def test_audit_on_generated_data_matches_reference(spark: SparkSession, tmp_path: Path) -> None:
    data = generate_demo_data(tmp_path, stubs=2500, seed=11)
    assert data.topic_export_path is not None
    export_rows = ds.dataset(data.topic_export_path, partitioning="hive").to_table().to_pylist()
    log_rows = read_rows(data.log_path)
    summary = run_audit(
        spark,
        export=str(data.topic_export_path),
        log=str(data.log_path),
        out=str(tmp_path / "audit"),
        now=DEMO_NOW,
        late_after=30,
        grace=300,
    )
    want = reference_audit(export_rows, log_rows, DEMO_NOW, 30, 300)
    assert want["lost"]
    assert want["duplicated"]
    assert want["late"]
    for name in ("lost", "duplicated", "late"):
        got = {
            (r["topic"], r["consumer_group"], r["message_id"])
            for r in read_rows(tmp_path / "audit" / name)
        }
        assert got == want[name], name
    per_pair = {(r["topic"], r["consumer_group"]): r for r in summary.rows}
    for name, column in (
        ("stored", "stored"),
        ("lost", "lost"),
        ("duplicated", "duplicated"),
        ("late", "late"),
    ):
        counts = Counter((t, g) for t, g, _ in want[name])
        assert {k: v[column] for k, v in per_pair.items() if v[column]} == dict(counts), name
    hours = read_rows(tmp_path / "audit" / "summary")
    assert len({r["hour"] for r in hours}) > 1  # six hours of data, bucketed per hour
    assert all(r["hour"].minute == 0 for r in hours)


def test_audit_edge_cases(spark: SparkSession) -> None:
    now = T0
    export = [
        export_row("consumed", now - timedelta(hours=1)),
        export_row("lost", now - timedelta(hours=1)),
        export_row("young", now - timedelta(seconds=299)),  # within the grace period
        export_row("grace-edge", now - timedelta(seconds=300)),  # exactly at it: lost
        export_row("late-edge", now - timedelta(hours=1)),
        export_row("late", now - timedelta(hours=1)),
        export_row("dup", now - timedelta(hours=1)),
        export_row("stored-twice", now - timedelta(hours=1), queue_offset=1),
        export_row("stored-twice", now - timedelta(hours=1) + timedelta(seconds=1), queue_offset=2),
        export_row("received-only", now - timedelta(hours=1)),
        export_row("dlq", now - timedelta(hours=1), topic="%DLQ%billing"),
        export_row("pay", now - timedelta(hours=1), topic="payments"),
    ]
    hour_ago = now - timedelta(hours=1)
    log = [
        log_row("consumed", 0, consumed_at=hour_ago + timedelta(seconds=1)),
        log_row("late-edge", 0, consumed_at=hour_ago + timedelta(seconds=60)),  # not late: strict
        log_row("late", 0, consumed_at=hour_ago + timedelta(seconds=61)),
        log_row("dup", 0, receive_count=2, consumed_at=hour_ago),
        log_row("stored-twice", 0, receive_count=2, consumed_at=hour_ago),
        log_row("received-only", 0, status="RECEIVED", consumed_at=None),
    ]
    export_df = arrow_df(spark, export, TOPIC_EXPORT_SCHEMA)
    log_df = arrow_df(spark, log, MESSAGE_LOG_SCHEMA)
    audit = delivery_audit(export_df, log_df, now=now, late_after=60, grace=300)
    want = reference_audit(export, log, now, 60, 300)
    assert (
        keys(audit.lost)
        == want["lost"]
        == {("orders", "billing", m) for m in ("lost", "grace-edge", "received-only")}
    )
    assert keys(audit.late) == want["late"] == {("orders", "billing", "late")}
    assert keys(audit.duplicated) == want["duplicated"]
    (row,) = audit.summary.collect()
    assert (row["stored"], row["never_received"], row["received_not_consumed"]) == (9, 2, 1)
    assert row["duplicate_stores"] == 1
    # "payments" has no consumer in the log: only an explicit subscription makes it audited.
    with_sub = delivery_audit(
        export_df, log_df, now=now, late_after=60, grace=300, subscriptions=[("payments", "ledger")]
    )
    assert ("payments", "ledger", "pay") in keys(with_sub.lost)
    only_ledger = delivery_audit(
        export_df, log_df, now=now, groups=["ledger"], subscriptions=[("payments", "ledger")]
    )
    assert keys(only_ledger.lost) == {("payments", "ledger", "pay")}
