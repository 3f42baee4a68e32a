"""DLQ ageing, top errors and stuck FIFO groups against plain-Python references."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from pocketmq.pipeline.demo import DEMO_NOW, generate_demo_data
from pocketmq.pipeline.dlq import AGE_BUCKETS, dlq_report, run_dlq_report
from pocketmq.pipeline.schemas import ATTEMPT_HISTORY_SCHEMA, TOPIC_EXPORT_SCHEMA

from .helpers import T0, arrow_df, read_rows

pytestmark = pytest.mark.spark

Row = dict[str, Any]
FAILED = {"RECONSUME_LATER", "EXCEPTION", "TIMEOUT", "INVISIBLE_EXPIRED"}
NOT_FAILED = {"SUCCESS", "REDRIVEN"}  # an operator's redrive is not a failed delivery


def naive(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


def bucket(age: float) -> str:
    for name, upper in AGE_BUCKETS:
        if upper is None or age < upper:
            return name
    raise AssertionError


def reference_ageing(dlq: Iterable[Row], now: datetime) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for r in dlq:
        props = dict(r["properties"] or [])
        age = (now - naive(r["store_timestamp"])).total_seconds()
        out[(r["topic"][len("%DLQ%") :], props.get("RETRY_TOPIC", "(unknown)"), bucket(age))] += 1
    return out


def normalise(error: str) -> str:
    return re.sub(r"[0-9]+", "#", error.split("\n", 1)[0]).strip()[:200]


def reference_errors(attempts: Iterable[Row], top: int) -> dict[str, list[tuple[str, int]]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for a in attempts:
        if a["outcome"] in NOT_FAILED:
            continue
        counts[a["consumer_group"]][normalise(a["error"]) if a["error"] else a["outcome"]] += 1
    return {g: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:top] for g, c in counts.items()}


def reference_stuck(
    attempts: Iterable[Row], now: datetime, after: float
) -> dict[tuple[str, str, str], tuple[datetime, int]]:
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for a in attempts:
        if a["message_group"] is not None:
            groups[(a["consumer_group"], a["topic"], a["message_group"])].append(a)
    out = {}
    for key, rows in groups.items():
        rows.sort(key=lambda a: (naive(a["delivered_at"]), a["attempt"]))
        if rows[-1]["outcome"] not in FAILED:
            continue
        settled = [naive(a["delivered_at"]) for a in rows if a["outcome"] in ("SUCCESS", "DLQ")]
        last = max(settled) if settled else None
        open_rows = [a for a in rows if last is None or naive(a["delivered_at"]) > last]
        since = min(naive(a["delivered_at"]) for a in open_rows)
        if (now - since).total_seconds() > after:
            out[key] = (since, len(open_rows))
    return out


def attempt(
    mg: str | None,
    n: int,
    outcome: str,
    at: datetime,
    *,
    group: str = "ledger",
    error: str | None = None,
    mid: str | None = None,
) -> Row:
    return {
        "message_id": mid or f"{mg}-{n}",
        "consumer_group": group,
        "topic": "payments",
        "message_group": mg,
        "attempt": n,
        "consumer": "host-1",
        "outcome": outcome,
        "error": error
        if error is not None or outcome == "SUCCESS"
        else f"{outcome} after 30{n} ms",
        "delivered_at": at.replace(tzinfo=UTC),
        "finished_at": (at + timedelta(milliseconds=50)).replace(tzinfo=UTC),
    }


def dlq_row(i: int, group: str, topic: str | None, stored: datetime) -> Row:
    props = [("RETRY_TOPIC", topic), ("ORIGIN_MESSAGE_ID", f"orig-{i}")] if topic else []
    return {
        "message_id": f"dlq-{i}",
        "topic": f"%DLQ%{group}",
        "queue_id": 0,
        "queue_offset": i,
        "body": b"",
        "tag": None,
        "keys": None,
        "message_group": None,
        "delivery_attempt": 17,
        "born_timestamp": stored.replace(tzinfo=UTC),
        "store_timestamp": stored.replace(tzinfo=UTC),
        "properties": props,
        "broker_name": "broker-a",
        "date": stored.strftime("%Y-%m-%d"),
    }


def test_edge_cases(spark: SparkSession) -> None:
    now = T0
    m = timedelta(minutes=1)
    attempts = [
        # A: success, then two failures 30 and 20 minutes ago -> stuck since 30 min ago.
        attempt("A", 1, "SUCCESS", now - 60 * m, mid="a0"),
        attempt("A", 1, "EXCEPTION", now - 30 * m, mid="a1"),
        attempt("A", 2, "TIMEOUT", now - 20 * m, mid="a1"),
        # B: one failure 5 minutes ago -> not yet stuck (threshold 10 minutes).
        attempt("B", 1, "EXCEPTION", now - 5 * m),
        # C: failed, then moved to the DLQ -> the group went on.
        attempt("C", 1, "EXCEPTION", now - 60 * m),
        attempt("C", 2, "DLQ", now - 50 * m),
        attempt("C", 3, "REDRIVEN", now - 40 * m, error="resent from %DLQ%ledger offset 3"),
        # D: failed, then succeeded.
        attempt("D", 1, "EXCEPTION", now - 60 * m),
        attempt("D", 2, "SUCCESS", now - 1 * m),
        # E: never succeeded.
        attempt("E", 1, "RECONSUME_LATER", now - 120 * m, error="balance locked\nstack..."),
        attempt("E", 2, "RECONSUME_LATER", now - 100 * m, error="balance locked\nother"),
        # F: exactly at the threshold -> not stuck (strictly more than).
        attempt("F", 1, "INVISIBLE_EXPIRED", now - 10 * m),
        # Not FIFO: never "stuck".
        attempt(None, 1, "EXCEPTION", now - 600 * m, mid="plain"),
        attempt("X", 1, "EXCEPTION", now - 90 * m, group="billing"),
    ]
    dlq = [
        dlq_row(1, "billing", "orders", now - 30 * m),
        dlq_row(2, "billing", "orders", now - 60 * m),  # exactly 1 h: next bucket
        dlq_row(3, "billing", "orders", now - 3 * 24 * 60 * m),
        dlq_row(4, "billing", None, now - 8 * 24 * 60 * m),
        dlq_row(5, "ledger", "payments", now - 7 * 60 * m),
    ]
    report = dlq_report(
        arrow_df(spark, dlq, TOPIC_EXPORT_SCHEMA),
        arrow_df(spark, attempts, ATTEMPT_HISTORY_SCHEMA),
        now=now,
        stuck_after=600,
        top_errors=2,
    )
    stuck = {
        (r["consumer_group"], r["topic"], r["message_group"]): r for r in report.stuck.collect()
    }
    want = reference_stuck(attempts, now, 600)
    assert (
        set(stuck)
        == set(want)
        == {("ledger", "payments", "A"), ("ledger", "payments", "E"), ("billing", "payments", "X")}
    )
    for key, (since, n) in want.items():
        assert (stuck[key]["stuck_since"], stuck[key]["failed_attempts"]) == (since, n)
    assert stuck[("ledger", "payments", "A")]["blocking_message_id"] == "a1"
    assert stuck[("ledger", "payments", "A")]["last_success_at"] == now - 60 * m + timedelta(
        milliseconds=50
    )
    assert stuck[("ledger", "payments", "E")]["stuck_seconds"] == 7200.0

    ageing = Counter(
        {
            (r["consumer_group"], r["original_topic"], r["age_bucket"]): r["messages"]
            for r in report.ageing.collect()
        }
    )
    assert ageing == reference_ageing(dlq, now)
    assert ageing[("billing", "orders", "1h-6h")] == 1

    errors = defaultdict(list)
    for r in report.errors.collect():
        errors[r["consumer_group"]].append((r["error"], r["attempts"]))
    assert dict(errors) == reference_errors(attempts, 2)
    # Numbers are masked, so the five "EXCEPTION after 30N ms" texts are one cause.
    assert errors["ledger"] == [("EXCEPTION after # ms", 5), ("balance locked", 2)]

    summary = {r["consumer_group"]: r for r in report.summary.collect()}
    assert summary["billing"]["dlq_messages"] == 4
    assert summary["ledger"]["stuck_message_groups"] == 2
    assert summary["ledger"]["failed_attempts"] == sum(
        1 for a in attempts if a["consumer_group"] == "ledger" and a["outcome"] not in NOT_FAILED
    )


def test_report_on_generated_data_matches_reference(spark: SparkSession, tmp_path: Path) -> None:
    data = generate_demo_data(tmp_path, stubs=3000, seed=2)
    assert data.dlq_export_path is not None
    assert data.attempts_path is not None
    dlq = ds.dataset(data.dlq_export_path, partitioning="hive").to_table().to_pylist()
    attempts = read_rows(data.attempts_path)
    summary = run_dlq_report(
        spark,
        dlq=str(data.dlq_export_path),
        attempts=str(data.attempts_path),
        out=str(tmp_path / "report"),
        now=DEMO_NOW,
        stuck_after=600,
        top_errors=3,
    )
    assert dlq
    for r in dlq:  # the partition directory names decode back to the DLQ topic names
        assert r["topic"].startswith("%DLQ%")
    ageing = Counter(
        {
            (r["consumer_group"], r["original_topic"], r["age_bucket"]): r["messages"]
            for r in read_rows(tmp_path / "report" / "ageing")
        }
    )
    assert ageing == reference_ageing(dlq, DEMO_NOW)
    stuck = {
        (r["consumer_group"], r["topic"], r["message_group"])
        for r in read_rows(tmp_path / "report" / "stuck")
    }
    assert stuck == set(reference_stuck(attempts, DEMO_NOW, 600))
    assert stuck  # the generated FIFO topic has failing message groups
    assert summary.stuck == len(stuck)
    errors = defaultdict(list)
    for r in sorted(
        read_rows(tmp_path / "report" / "errors"), key=lambda r: (r["consumer_group"], r["rank"])
    ):
        errors[r["consumer_group"]].append((r["error"], r["attempts"]))
    assert dict(errors) == reference_errors(attempts, 3)
    assert {r["consumer_group"] for r in summary.rows} >= {g for g, _, _ in ageing}
