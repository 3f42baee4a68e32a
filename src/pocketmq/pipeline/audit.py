"""Delivery audit: what the broker stored against what each consumer group logged.

Inputs are a topic export (:data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA`; retry and DLQ
topics in it are ignored) and the consumers' message logs
(:data:`~pocketmq.pipeline.schemas.MESSAGE_LOG_SCHEMA`). A group is expected to consume a topic
when it logged at least one message of that topic, or when the caller names the pair
explicitly (a group that consumed nothing at all cannot be discovered from its own log).

For every stored message and every group expected to consume its topic:

* **lost** — the group has no CONSUMED log row for it, and it was stored more than ``grace``
  seconds before ``now`` (younger messages may simply still be queued). Split into
  *never received* (no log row) and *received, not consumed* (a RECEIVED row: the handler keeps
  failing, or the process died mid-way);
* **duplicated** — the group received it more than once (``receive_count > 1``; the idempotent
  consumer absorbed the repeats). ``duplicate_stores`` separately counts messages the broker
  stored more than once under the same id (a producer retry after a lost acknowledgement);
* **late** — consumed more than ``late_after`` seconds after it was stored.

The summary aggregates per topic, consumer group and hour (UTC) of the store time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pocketmq.pipeline.io import read_export, read_table, write_parquet
from pocketmq.pipeline.reconcile import timestamp_literal
from pocketmq.pipeline.schemas import (
    DLQ_TOPIC_PREFIX,
    MESSAGE_LOG_SCHEMA,
    RETRY_TOPIC_PREFIX,
    TOPIC_EXPORT_SCHEMA,
)
from pocketmq.reliability.clock import as_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_LATE_AFTER_SECONDS",
    "AuditSummary",
    "DeliveryAudit",
    "delivery_audit",
    "run_audit",
]

DEFAULT_LATE_AFTER_SECONDS: Final = 60.0
DEFAULT_GRACE_SECONDS: Final = 300.0
#: The columns of the lost, duplicated and late lists.
_DETAIL_COLUMNS: Final = (
    "topic",
    "consumer_group",
    "message_id",
    "broker_name",
    "queue_id",
    "queue_offset",
    "stored_at",
    "log_status",
    "receive_count",
    "consumed_at",
    "latency_s",
)


@dataclass(frozen=True, slots=True)
class DeliveryAudit:
    """The audit's DataFrames (lazy until written or collected).

    * ``summary``: topic, consumer_group, hour, stored, consumed, lost, never_received,
      received_not_consumed, duplicated, duplicate_stores, late, avg_latency_s, max_latency_s
    * ``lost`` / ``duplicated`` / ``late``: one row per (message, group) with topic,
      consumer_group, message_id, broker_name, queue_id, queue_offset, stored_at, log_status,
      receive_count, consumed_at, latency_s
    """

    summary: DataFrame
    lost: DataFrame
    duplicated: DataFrame
    late: DataFrame
    #: Every (stored message, expected group) with its flags: is_consumed, is_lost,
    #: is_duplicated, is_late, latency_s, hour, copies. The other frames derive from it.
    rows: DataFrame


def delivery_audit(
    export: DataFrame,
    log: DataFrame,
    *,
    now: datetime,
    late_after: float = DEFAULT_LATE_AFTER_SECONDS,
    grace: float = DEFAULT_GRACE_SECONDS,
    groups: Sequence[str] | None = None,
    subscriptions: Sequence[tuple[str, str]] = (),
) -> DeliveryAudit:
    """Audit deliveries of the messages in ``export`` as logged in ``log``.

    ``groups`` restricts the audit to these consumer groups; ``subscriptions`` adds
    ``(topic, group)`` pairs expected to consume even if the log never mentions them.
    """
    from pyspark.sql import functions as F

    stored = _stored_messages(export)
    if groups is not None:
        log = log.where(F.col("consumer_group").isin(*groups))
    pairs = _expected_pairs(export.sparkSession, log, groups, subscriptions)
    receipts = log.select(
        "consumer_group",
        "message_id",
        F.col("status").alias("log_status"),
        "receive_count",
        "consumed_at",
    )
    expected = stored.join(F.broadcast(pairs), on="topic", how="inner")
    joined = expected.join(receipts, on=["consumer_group", "message_id"], how="left")
    flagged = _flag_deliveries(joined, now=now, late_after=late_after, grace=grace)
    return DeliveryAudit(
        summary=_hourly_summary(flagged),
        lost=flagged.where("is_lost").select(*_DETAIL_COLUMNS),
        duplicated=flagged.where("is_duplicated").select(*_DETAIL_COLUMNS),
        late=flagged.where("is_late").select(*_DETAIL_COLUMNS),
        rows=flagged,
    )


def _stored_messages(export: DataFrame) -> DataFrame:
    """One row per stored message id of the export's own topics (retry and DLQ topics left
    out): where its first copy went and how many copies the broker stored."""
    from pyspark.sql import functions as F

    topic = F.col("topic")
    stored_rows = export.where(
        ~topic.startswith(RETRY_TOPIC_PREFIX) & ~topic.startswith(DLQ_TOPIC_PREFIX)
    ).select(
        "topic",
        "message_id",
        "broker_name",
        "queue_id",
        "queue_offset",
        F.col("store_timestamp").cast("timestamp_ntz").alias("stored_at"),
    )
    return (
        stored_rows.groupBy("topic", "message_id")
        .agg(
            F.min_by(F.struct("broker_name", "queue_id", "queue_offset"), "stored_at").alias("at"),
            F.min("stored_at").alias("stored_at"),
            F.count(F.lit(1)).alias("copies"),
        )
        .select(
            "topic",
            "message_id",
            "at.broker_name",
            "at.queue_id",
            "at.queue_offset",
            "stored_at",
            "copies",
        )
    )


def _expected_pairs(
    spark: SparkSession,
    log: DataFrame,
    groups: Sequence[str] | None,
    subscriptions: Sequence[tuple[str, str]],
) -> DataFrame:
    """(topic, consumer_group) pairs expected to consume: those the log mentions, plus the
    named ``subscriptions`` of the audited groups (a group that consumed nothing cannot be
    discovered from its own log)."""
    pairs = log.select("topic", "consumer_group").distinct()
    extra = [(t, g) for t, g in subscriptions if groups is None or g in groups]
    if extra:
        pairs = pairs.unionByName(
            spark.createDataFrame(extra, "topic STRING, consumer_group STRING")
        ).distinct()
    return pairs


def _flag_deliveries(
    joined: DataFrame, *, now: datetime, late_after: float, grace: float
) -> DataFrame:
    """Every (stored message, expected group) with is_consumed, latency_s, is_lost,
    is_duplicated, is_late and the hour it was stored."""
    from pyspark.sql import functions as F

    now_lit = timestamp_literal(now)
    consumed = F.col("log_status") == F.lit("CONSUMED")
    latency = F.when(
        consumed,
        F.unix_micros(F.col("consumed_at").cast("timestamp"))
        - F.unix_micros(F.col("stored_at").cast("timestamp")),
    ) / F.lit(1_000_000.0)
    old_enough = F.col("stored_at") <= now_lit - F.make_dt_interval(secs=F.lit(grace))
    return joined.select(
        "*",
        F.coalesce(consumed, F.lit(False)).alias("is_consumed"),
        latency.alias("latency_s"),
        (F.coalesce(~consumed, F.lit(True)) & old_enough).alias("is_lost"),
        (F.coalesce(F.col("receive_count"), F.lit(0)) > 1).alias("is_duplicated"),
        F.coalesce(latency > F.lit(late_after), F.lit(False)).alias("is_late"),
    ).withColumn("hour", F.date_trunc("hour", F.col("stored_at")))


def _hourly_summary(flagged: DataFrame) -> DataFrame:
    """The flags counted per topic, consumer group and hour of the store time."""
    from pyspark.sql import functions as F

    def count_if(cond: Column) -> Column:
        return F.sum(F.when(cond, 1).otherwise(0))

    return (
        flagged.groupBy("topic", "consumer_group", "hour")
        .agg(
            F.count(F.lit(1)).alias("stored"),
            count_if(F.col("is_consumed")).alias("consumed"),
            count_if(F.col("is_lost")).alias("lost"),
            count_if(F.col("is_lost") & F.col("log_status").isNull()).alias("never_received"),
            count_if(F.col("is_lost") & F.col("log_status").isNotNull()).alias(
                "received_not_consumed"
            ),
            count_if(F.col("is_duplicated")).alias("duplicated"),
            count_if(F.col("copies") > 1).alias("duplicate_stores"),
            count_if(F.col("is_late")).alias("late"),
            F.avg("latency_s").alias("avg_latency_s"),
            F.max("latency_s").alias("max_latency_s"),
        )
        .orderBy("topic", "consumer_group", "hour")
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditSummary:
    """Totals per (topic, consumer_group) of a written audit, and where it went: what the command
    prints, read back from the written summary rather than computed twice."""

    rows: tuple[dict[str, object], ...]
    out: str
    seconds: float


def run_audit(
    spark: SparkSession,
    *,
    export: str,
    log: str,
    out: str,
    now: datetime | None = None,
    late_after: float = DEFAULT_LATE_AFTER_SECONDS,
    grace: float = DEFAULT_GRACE_SECONDS,
    groups: Sequence[str] | None = None,
    subscriptions: Sequence[tuple[str, str]] = (),
    log_table: str = "message_log",
) -> AuditSummary:
    """Read the export and the log, write ``out/{summary,lost,duplicated,late}`` as Parquet."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.perf_counter()
    moment = as_of(now)
    export_df = read_export(spark, export, TOPIC_EXPORT_SCHEMA)
    log_df = read_table(spark, log, table=log_table, schema=MESSAGE_LOG_SCHEMA)
    audit = delivery_audit(
        export_df,
        log_df,
        now=moment,
        late_after=late_after,
        grace=grace,
        groups=groups,
        subscriptions=subscriptions,
    )
    base = out.rstrip("/")
    # Four outputs from one join: keep the joined rows instead of recomputing them per output.
    audit.rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        write_parquet(audit.summary.coalesce(1), f"{base}/summary")
        for name in ("lost", "duplicated", "late"):
            write_parquet(getattr(audit, name), f"{base}/{name}")
    finally:
        audit.rows.unpersist()
    counters = [
        "stored",
        "consumed",
        "lost",
        "never_received",
        "received_not_consumed",
        "duplicated",
        "duplicate_stores",
        "late",
    ]
    totals = (
        spark.read.parquet(f"{base}/summary")
        .groupBy("topic", "consumer_group")
        .agg(*[F.sum(c).alias(c) for c in counters], F.max("max_latency_s").alias("max_latency_s"))
        .orderBy("topic", "consumer_group")
        .collect()
    )
    return AuditSummary(
        rows=tuple(r.asDict() for r in totals), out=base, seconds=time.perf_counter() - started
    )
