"""DLQ and retry analytics: how old the dead letters are, what keeps failing, what is stuck.

Inputs are DLQ topic exports (:data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA`, topics
``%DLQ%<group>``, with the original topic in property ``RETRY_TOPIC``) and the broker's attempt
history (:data:`~pocketmq.pipeline.schemas.ATTEMPT_HISTORY_SCHEMA`).

* **ageing** — dead letters per consumer group and original topic, bucketed by time in the DLQ:
  ``<1h``, ``1h-6h``, ``6h-24h``, ``1d-7d``, ``>7d``. Nothing leaves a DLQ by itself, so old
  buckets are work an operator has not done.
* **top errors** — failed attempts (every outcome except SUCCESS and an operator's REDRIVEN)
  grouped by error text per consumer group, most frequent first. The text is normalised so that
  one cause is one row: first line only, numbers replaced by ``#``, at most 200 characters.
* **stuck FIFO groups** — per (consumer group, topic, message group): the latest attempt
  failed (RECONSUME_LATER, EXCEPTION, TIMEOUT or INVISIBLE_EXPIRED) and nothing settled the
  group (a SUCCESS, or a DLQ move that lets the group go on) for more than ``stuck_after``
  seconds, counted from the first attempt after the last settlement. A stuck message group
  blocks every later message of the same group.
* **summary** — one row per consumer group combining the three.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pocketmq.pipeline.io import read_export, read_table, write_parquet
from pocketmq.pipeline.reconcile import timestamp_literal
from pocketmq.pipeline.schemas import (
    ATTEMPT_HISTORY_SCHEMA,
    DLQ_TOPIC_PREFIX,
    FAILED_OUTCOMES,
    PROPERTY_RETRY_TOPIC,
    TOPIC_EXPORT_SCHEMA,
)
from pocketmq.reliability.clock import as_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "AGE_BUCKETS",
    "DEFAULT_STUCK_AFTER_SECONDS",
    "DEFAULT_TOP_ERRORS",
    "DlqReport",
    "DlqSummary",
    "dlq_report",
    "normalise_error",
    "run_dlq_report",
]

#: (label, upper bound in seconds); the last bucket is open-ended.
AGE_BUCKETS: Final = (
    ("<1h", 3600),
    ("1h-6h", 6 * 3600),
    ("6h-24h", 24 * 3600),
    ("1d-7d", 7 * 24 * 3600),
    (">7d", None),
)
DEFAULT_STUCK_AFTER_SECONDS: Final = 600.0
DEFAULT_TOP_ERRORS: Final = 10
_SETTLING_OUTCOMES: Final = ("SUCCESS", "DLQ")
#: Outcomes that are not failures: a success, and an operator's redrive out of the DLQ.
_NOT_FAILED: Final = ("SUCCESS", "REDRIVEN")


@dataclass(frozen=True, slots=True)
class DlqReport:
    """The report's DataFrames.

    * ``ageing``: consumer_group, original_topic, age_bucket, bucket_order, messages,
      oldest_stored_at
    * ``errors``: consumer_group, rank, error, attempts, messages, last_seen, example
    * ``stuck``: consumer_group, topic, message_group, stuck_since, stuck_seconds,
      failed_attempts, latest_outcome, latest_error, blocking_message_id, last_success_at
    * ``summary``: consumer_group, dlq_messages, oldest_dlq_at, attempts, failed_attempts,
      retried_messages, stuck_message_groups
    """

    ageing: DataFrame
    errors: DataFrame
    stuck: DataFrame
    summary: DataFrame


def normalise_error(error: Column) -> Column:
    """First line of ``error``, numbers as ``#``, trimmed and cut to 200 characters."""
    from pyspark.sql import functions as F

    first_line = F.split(error, "\n", 2).getItem(0)
    return F.substring(F.trim(F.regexp_replace(first_line, r"[0-9]+", "#")), 1, 200)


def _age_bucket(age_seconds: Column) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    label: Column | None = None
    order: Column | None = None
    for i, (name, upper) in enumerate(AGE_BUCKETS):
        if upper is None:
            assert label is not None
            assert order is not None
            return label.otherwise(F.lit(name)), order.otherwise(F.lit(i))
        cond = age_seconds < F.lit(upper)
        label = F.when(cond, F.lit(name)) if label is None else label.when(cond, F.lit(name))
        order = F.when(cond, F.lit(i)) if order is None else order.when(cond, F.lit(i))
    raise AssertionError("AGE_BUCKETS must end with an open bucket")


def _seconds_between(later: Column, earlier: Column) -> Column:
    from pyspark.sql import functions as F

    return (
        F.unix_micros(later.cast("timestamp")) - F.unix_micros(earlier.cast("timestamp"))
    ) / F.lit(1_000_000.0)


def dlq_report(
    dlq_export: DataFrame,
    attempts: DataFrame,
    *,
    now: datetime,
    stuck_after: float = DEFAULT_STUCK_AFTER_SECONDS,
    top_errors: int = DEFAULT_TOP_ERRORS,
    group: str | None = None,
) -> DlqReport:
    """Build the DLQ and retry report as of ``now``; ``group`` limits it to one consumer group."""
    now_lit = timestamp_literal(now)
    dead = _dead_letters(dlq_export, group)
    ageing = _ageing(dead, now_lit)
    att = _attempt_rows(attempts, group)
    errors = _top_errors(att, top_errors)
    stuck = _stuck_fifo_groups(att, now_lit, stuck_after)
    summary = _summary(dead, att, stuck)
    return DlqReport(ageing=ageing, errors=errors, stuck=stuck, summary=summary)


def _dead_letters(dlq_export: DataFrame, group: str | None) -> DataFrame:
    """consumer_group, original_topic, stored_at of every message in a ``%DLQ%`` topic."""
    from pyspark.sql import functions as F

    dead = dlq_export.where(F.col("topic").startswith(DLQ_TOPIC_PREFIX)).select(
        F.expr(f"substring(topic, {len(DLQ_TOPIC_PREFIX) + 1})").alias("consumer_group"),
        F.coalesce(
            F.element_at(F.col("properties"), F.lit(PROPERTY_RETRY_TOPIC)), F.lit("(unknown)")
        ).alias("original_topic"),
        F.col("store_timestamp").cast("timestamp_ntz").alias("stored_at"),
    )
    if group is not None:
        dead = dead.where(F.col("consumer_group") == group)
    return dead


def _ageing(dead: DataFrame, now_lit: Column) -> DataFrame:
    """Dead letters per group, original topic and :data:`AGE_BUCKETS` bucket."""
    from pyspark.sql import functions as F

    bucket, bucket_order = _age_bucket(_seconds_between(now_lit, F.col("stored_at")))
    return (
        dead.withColumn("age_bucket", bucket)
        .withColumn("bucket_order", bucket_order)
        .groupBy("consumer_group", "original_topic", "age_bucket", "bucket_order")
        .agg(F.count(F.lit(1)).alias("messages"), F.min("stored_at").alias("oldest_stored_at"))
        .orderBy("consumer_group", "original_topic", "bucket_order")
    )


def _attempt_rows(attempts: DataFrame, group: str | None) -> DataFrame:
    """The attempt history's columns the report reads, times as wall-clock UTC."""
    from pyspark.sql import functions as F

    att = attempts.select(
        "message_id",
        "consumer_group",
        "topic",
        "message_group",
        "attempt",
        "outcome",
        "error",
        F.col("delivered_at").cast("timestamp_ntz").alias("delivered_at"),
        F.col("finished_at").cast("timestamp_ntz").alias("finished_at"),
    )
    if group is not None:
        att = att.where(F.col("consumer_group") == group)
    return att


def _top_errors(att: DataFrame, top_errors: int) -> DataFrame:
    """The ``top_errors`` most frequent normalised errors of failed attempts, per group."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    failed = att.where(~F.col("outcome").isin(*_NOT_FAILED))
    by_error = failed.withColumn(
        "error_key", F.coalesce(normalise_error(F.col("error")), F.col("outcome"))
    ).groupBy("consumer_group", "error_key")
    errors_all = by_error.agg(
        F.count(F.lit(1)).alias("attempts"),
        F.count_distinct("message_id").alias("messages"),
        F.max("delivered_at").alias("last_seen"),
        F.max_by(F.col("error"), F.col("delivered_at")).alias("example"),
    )
    rank_window = Window.partitionBy("consumer_group").orderBy(
        F.col("attempts").desc(), F.col("error_key")
    )
    return (
        errors_all.withColumn("rank", F.row_number().over(rank_window))
        .where(F.col("rank") <= top_errors)
        .select(
            "consumer_group",
            "rank",
            F.col("error_key").alias("error"),
            "attempts",
            "messages",
            "last_seen",
            "example",
        )
        .orderBy("consumer_group", "rank")
    )


def _stuck_fifo_groups(att: DataFrame, now_lit: Column, stuck_after: float) -> DataFrame:
    """Message groups whose latest attempt failed and that nothing settled for more than
    ``stuck_after`` seconds, counted from the first attempt after the last settlement."""
    from pyspark.sql import functions as F

    fifo = att.where(F.col("message_group").isNotNull())
    key = ["consumer_group", "topic", "message_group"]
    settled = F.col("outcome").isin(*_SETTLING_OUTCOMES)
    per_group = fifo.groupBy(*key).agg(
        F.max(F.when(settled, F.col("delivered_at"))).alias("last_settled_at"),
        F.max(F.when(F.col("outcome") == "SUCCESS", F.col("finished_at"))).alias("last_success_at"),
        F.max_by(
            F.struct("outcome", "error", "message_id"), F.struct("delivered_at", "attempt")
        ).alias("latest"),
    )
    since = (
        fifo.join(per_group.select(*key, "last_settled_at"), on=key)
        .where(
            F.col("last_settled_at").isNull() | (F.col("delivered_at") > F.col("last_settled_at"))
        )
        .groupBy(*key)
        .agg(
            F.min("delivered_at").alias("stuck_since"),
            F.count(F.lit(1)).alias("failed_attempts"),
        )
    )
    return (
        per_group.join(since, on=key)
        .where(F.col("latest.outcome").isin(*FAILED_OUTCOMES))
        .withColumn("stuck_seconds", _seconds_between(now_lit, F.col("stuck_since")))
        .where(F.col("stuck_seconds") > F.lit(stuck_after))
        .select(
            *key,
            "stuck_since",
            "stuck_seconds",
            "failed_attempts",
            F.col("latest.outcome").alias("latest_outcome"),
            F.col("latest.error").alias("latest_error"),
            F.col("latest.message_id").alias("blocking_message_id"),
            "last_success_at",
        )
        .orderBy(F.col("stuck_seconds").desc())
    )


def _summary(dead: DataFrame, att: DataFrame, stuck: DataFrame) -> DataFrame:
    """One row per consumer group that has dead letters, attempts or stuck groups (zeros
    where it has none of one kind)."""
    from pyspark.sql import functions as F

    dlq_counts = dead.groupBy("consumer_group").agg(
        F.count(F.lit(1)).alias("dlq_messages"), F.min("stored_at").alias("oldest_dlq_at")
    )
    attempt_counts = att.groupBy("consumer_group").agg(
        F.count(F.lit(1)).alias("attempts"),
        F.sum(F.when(~F.col("outcome").isin(*_NOT_FAILED), 1).otherwise(0)).alias(
            "failed_attempts"
        ),
        F.count_distinct(F.when(F.col("attempt") > 1, F.col("message_id"))).alias(
            "retried_messages"
        ),
    )
    stuck_counts = stuck.groupBy("consumer_group").agg(
        F.count(F.lit(1)).alias("stuck_message_groups")
    )
    return (
        dlq_counts.join(attempt_counts, on="consumer_group", how="full")
        .join(stuck_counts, on="consumer_group", how="full")
        .select(
            "consumer_group",
            F.coalesce(F.col("dlq_messages"), F.lit(0)).alias("dlq_messages"),
            "oldest_dlq_at",
            F.coalesce(F.col("attempts"), F.lit(0)).alias("attempts"),
            F.coalesce(F.col("failed_attempts"), F.lit(0)).alias("failed_attempts"),
            F.coalesce(F.col("retried_messages"), F.lit(0)).alias("retried_messages"),
            F.coalesce(F.col("stuck_message_groups"), F.lit(0)).alias("stuck_message_groups"),
        )
        .orderBy("consumer_group")
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DlqSummary:
    """The per-group summary rows of a written report, and where it went: what the command
    prints, read back from the written files."""

    rows: tuple[dict[str, object], ...]
    stuck: int
    out: str
    seconds: float


def run_dlq_report(
    spark: SparkSession,
    *,
    dlq: str,
    attempts: str,
    out: str,
    now: datetime | None = None,
    stuck_after: float = DEFAULT_STUCK_AFTER_SECONDS,
    top_errors: int = DEFAULT_TOP_ERRORS,
    group: str | None = None,
) -> DlqSummary:
    """Read the DLQ export and attempt history, write ``out/{ageing,errors,stuck,summary}``."""
    started = time.perf_counter()
    moment = as_of(now)
    dlq_df = read_export(spark, dlq, TOPIC_EXPORT_SCHEMA)
    attempts_df = read_table(
        spark, attempts, table="attempt_history", schema=ATTEMPT_HISTORY_SCHEMA
    )
    report = dlq_report(
        dlq_df, attempts_df, now=moment, stuck_after=stuck_after, top_errors=top_errors, group=group
    )
    base = out.rstrip("/")
    for name in ("ageing", "errors", "stuck", "summary"):
        write_parquet(getattr(report, name).coalesce(1), f"{base}/{name}")
    rows = tuple(
        r.asDict()
        for r in spark.read.parquet(f"{base}/summary").orderBy("consumer_group").collect()
    )
    stuck = spark.read.parquet(f"{base}/stuck").count()
    return DlqSummary(rows=rows, stuck=stuck, out=base, seconds=time.perf_counter() - started)
