"""Plain-Python references the Spark jobs are checked against, and small data builders."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from pocketmq.pipeline.schemas import MESSAGE_LOG_SCHEMA, MESSAGE_STUB_SCHEMA
from pocketmq.reliability.schema import reliability_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Row = dict[str, Any]


def run_cli(*args: str) -> tuple[int, str, str]:
    """``pocketmq ARGS`` in-process (it reuses the test run's Spark session): code, out, err."""
    from click.testing import CliRunner

    from pocketmq.cli import main

    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def reconcile_from_database(
    url: str, stub_table: str, log_table: str, out: Any, now: datetime, *extra: str
) -> list[str]:
    """The arguments of ``pocketmq pipeline reconcile`` over one database's two tables."""
    return [
        "pipeline",
        "reconcile",
        "--stubs",
        url,
        "--log",
        url,
        "--out",
        str(out),
        "--stubs-table",
        stub_table,
        "--log-table",
        log_table,
        "--now",
        now.isoformat(),
        *extra,
    ]


def arrow_df(spark: SparkSession, rows: list[Row], schema: pa.Schema) -> DataFrame:
    """A DataFrame with exactly ``schema`` (nullability included) from plain dicts."""
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema))


def read_rows(path: Any) -> list[Row]:
    return pq.read_table(path).to_pylist()


T0 = datetime(2026, 11, 22, 12, 0, 0)


def stub(message_id: str, **fields: Any) -> Row:
    row: Row = {
        "message_id": message_id,
        "topic": "orders",
        "tag": "created",
        "keys": "k1 k2",
        "content": b"{}",
        "status": "UNCONFIRMED",
        "send_count": 1,
        "broker_name": "broker-a",
        "queue_id": 0,
        "queue_offset": 0,
        "next_resend_at": T0,
        "created_at": T0,
        "updated_at": T0,
        "last_error": None,
    }
    row.update(fields)
    return row


def log_row(message_id: str, offset: int, **fields: Any) -> Row:
    row: Row = {
        "consumer_group": "billing",
        "message_id": message_id,
        "topic": "orders",
        "broker_name": "broker-a",
        "queue_id": 0,
        "queue_offset": offset,
        "status": "CONSUMED",
        "receive_count": 1,
        "created_at": T0,
        "consumed_at": T0,
    }
    row.update(fields)
    return row


def stubs_df(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return arrow_df(spark, rows, MESSAGE_STUB_SCHEMA)


def log_df(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return arrow_df(spark, rows, MESSAGE_LOG_SCHEMA)


def reference_unsettled(
    stubs: Iterable[Row], log: Iterable[Row], now: datetime, group: str | None = None
) -> list[Row]:
    """The resend rule (docs/pipeline.md "The rule") written the obvious way, row by row."""
    logged = [r for r in log if group is None or r["consumer_group"] == group]
    max_offset: dict[tuple[str, str, int], int] = {}
    for r in logged:
        key = (r["topic"], r["broker_name"], r["queue_id"])
        max_offset[key] = max(max_offset.get(key, r["queue_offset"]), r["queue_offset"])
    received = {r["message_id"] for r in logged}
    found = []
    for s in stubs:
        if s["status"] not in ("UNCONFIRMED", "UNKNOWN"):
            continue
        if s["next_resend_at"] > now:
            continue
        if s["queue_offset"] is not None:
            top = max_offset.get((s["topic"], s["broker_name"], s["queue_id"]))
            if top is None or not s["queue_offset"] < top:
                continue
        if s["message_id"] in received:
            continue
        found.append(s)
    return found


def reference_lists(
    stubs: Iterable[Row],
    log: Iterable[Row],
    now: datetime,
    max_sends: int,
    group: str | None = None,
) -> tuple[set[str], set[str]]:
    """(resend ids, manual ids)."""
    unsettled = reference_unsettled(stubs, log, now, group)
    resend = {s["message_id"] for s in unsettled if s["send_count"] < max_sends}
    manual = {s["message_id"] for s in unsettled if s["send_count"] >= max_sends}
    return resend, manual


def ids(df: DataFrame) -> set[str]:
    return {r["message_id"] for r in df.select("message_id").collect()}


def tables(suffix: str) -> tuple[sa.MetaData, sa.Table, sa.Table]:
    """The reliability toolkit's own two tables (its DDL on every database), under test names."""
    defined = reliability_tables(stub_table=f"pl_stub_{suffix}", log_table=f"pl_log_{suffix}")
    return defined.metadata, defined.stub, defined.log
