"""Reconciling the outbox with the consumers' receipt log: which messages to send again.

The rule is the reliability toolkit's resend rule (docs/reliability.md "Resend scheduler and manual
handling"), evaluated over whole tables at once (docs/pipeline.md "The rule"). A stub is
*unsettled* when all hold:

1. ``status`` is ``UNCONFIRMED`` or ``UNKNOWN`` (CONFIRMED and VOID are settled);
2. ``next_resend_at <= now`` (due; exactly at the boundary counts as due);
3. ``queue_offset IS NULL`` (the broker never acknowledged it: nothing to wait for) or
   ``queue_offset < max(log.queue_offset)`` over the log rows of the same
   (topic, broker_name, queue_id) — consumers have already moved *past* it, so it is not merely
   waiting in a backlog. Strictly less: a stub at the maximum logged offset is not resent;
4. its ``message_id`` has no row in the log (no consumer ever received it).

An unsettled stub with ``send_count < max_sends`` goes to the **resend list**; one with
``send_count >= max_sends`` goes to the **manual-handling list**. ``group`` restricts the log to
one consumer group (both for the maximum offsets and for "was it received"). Everything else is
left alone. With an empty log only stubs without an offset qualify.

The functions are pure ``DataFrame -> DataFrame`` transformations, so they run the same on a
laptop and on a cluster, and tests compare them with a plain-Python reference.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pocketmq.errors import InvalidArgumentError
from pocketmq.pipeline.io import read_table, write_parquet
from pocketmq.pipeline.schemas import MESSAGE_LOG_SCHEMA, MESSAGE_STUB_SCHEMA
from pocketmq.reliability.clock import as_of, utc_naive
from pocketmq.reliability.policy import ResendPolicy
from pocketmq.reliability.stub import PENDING_STATUS_VALUES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession

__all__ = [
    "DEFAULT_MAX_SENDS",
    "QUEUE_KEY",
    "RESEND_STATUSES",
    "ReconcileSummary",
    "manual_handling",
    "max_logged_offsets",
    "reconcile_lists",
    "resend_candidates",
    "run_reconcile",
    "timestamp_literal",
    "unsettled_stubs",
    "utc_naive",
]

#: Sends before manual handling: the toolkit's default, so both lists agree with its scheduler.
DEFAULT_MAX_SENDS: Final = ResendPolicy().max_sends
#: Statuses still worked on (UNCONFIRMED, UNKNOWN), as stored in ``message_stub.status``.
RESEND_STATUSES: Final = PENDING_STATUS_VALUES
#: The columns that identify a queue.
QUEUE_KEY: Final = ("topic", "broker_name", "queue_id")

_LOG_COLUMNS: Final = ("consumer_group", "message_id", *QUEUE_KEY, "queue_offset")
#: Columns of the lists whose values are (nearly) all distinct. Parquet's writer would try a
#: dictionary for each, fill it and fall back to plain encoding: wasted work (~15 % of the write).
_UNIQUE_VALUED_COLUMNS: Final = (
    "message_id",
    "keys",
    "content",
    "queue_offset",
    "next_resend_at",
    "created_at",
    "updated_at",
)
#: Text and payload columns whose values are all distinct. Parquet's writer keeps a min/max per
#: column chunk and page, and copies a value each time it becomes the new min or max: for ids in
#: creation order that is nearly every value (~10 % of the write). A min/max over unique ids,
#: keys and payloads prunes nothing, so the lists are written without them.
_NO_STATISTICS_COLUMNS: Final = ("message_id", "keys", "content")


def timestamp_literal(moment: datetime) -> Column:
    """A ``TIMESTAMP_NTZ`` literal holding ``moment`` in UTC, independent of any time zone."""
    from pyspark.sql import functions as F

    return F.lit(utc_naive(moment).isoformat(sep=" ")).cast("timestamp_ntz")


def _log_for(log: DataFrame, group: str | None) -> DataFrame:
    from pyspark.sql import functions as F

    if group is not None:
        log = log.where(F.col("consumer_group") == F.lit(group))
    return log


def max_logged_offsets(log: DataFrame, *, group: str | None = None) -> DataFrame:
    """``(topic, broker_name, queue_id, max_logged_offset)``: how far consumers got per queue."""
    from pyspark.sql import functions as F

    return (
        _log_for(log, group)
        .groupBy(*QUEUE_KEY)
        .agg(F.max("queue_offset").alias("max_logged_offset"))
    )


def unsettled_stubs(
    stubs: DataFrame, log: DataFrame, now: datetime, *, group: str | None = None
) -> DataFrame:
    """Stubs meeting every condition of the rule except the send count.

    Columns: the stub's columns plus ``max_logged_offset`` (null when its queue has no log row).
    """
    from pyspark.sql import functions as F

    log = _log_for(log, group)
    due = stubs.where(
        F.col("status").isin(*RESEND_STATUSES) & (F.col("next_resend_at") <= timestamp_literal(now))
    )
    # "Not in the log" without shuffling either side. Step 1: the log ids whose 32-bit hash
    # equals the hash of some due stub's id -- a broadcast of ~1M ints that the 9M log ids
    # (benchmark data) are streamed past. That set holds every due stub's log id plus a few
    # thousand ids that merely collide. Step 2: the due stubs whose id is *exactly* equal to
    # none of those (a broadcast of the ~0.3M ids found), so a collision can never hide a stub.
    # Shuffling the due stubs with their payload to meet the log ids cost more, and so did
    # 64-bit hashes (see docs/benchmarks.md).
    due_hashes = due.select(F.hash("message_id").alias("_id_hash"))
    maybe_received = (
        log.select(F.col("message_id").alias("_received_id"))
        .withColumn("_id_hash", F.hash("_received_id"))
        .join(F.broadcast(due_hashes), on="_id_hash", how="left_semi")
        .select("_received_id")
    )
    unreceived = due.join(
        F.broadcast(maybe_received), F.col("message_id") == F.col("_received_id"), how="left_anti"
    )
    # One row per queue: tiny, so broadcast it -- from one task, however many shuffle
    # partitions the session has (the write runs without AQE to coalesce them).
    offsets = F.broadcast(max_logged_offsets(log).coalesce(1))
    behind = unreceived.join(offsets, on=list(QUEUE_KEY), how="left").where(
        F.col("queue_offset").isNull() | (F.col("queue_offset") < F.col("max_logged_offset"))
    )
    return behind.select(*[c for c in stubs.columns], "max_logged_offset")


def resend_candidates(
    stubs: DataFrame,
    log: DataFrame,
    now: datetime,
    max_sends: int = DEFAULT_MAX_SENDS,
    *,
    group: str | None = None,
) -> DataFrame:
    """The resend list: unsettled stubs with ``send_count < max_sends``."""
    from pyspark.sql import functions as F

    return unsettled_stubs(stubs, log, now, group=group).where(F.col("send_count") < max_sends)


def manual_handling(
    stubs: DataFrame,
    log: DataFrame,
    now: datetime,
    max_sends: int = DEFAULT_MAX_SENDS,
    *,
    group: str | None = None,
) -> DataFrame:
    """The manual-handling list: unsettled stubs that already used ``max_sends`` sends."""
    from pyspark.sql import functions as F

    return unsettled_stubs(stubs, log, now, group=group).where(F.col("send_count") >= max_sends)


def reconcile_lists(
    stubs: DataFrame,
    log: DataFrame,
    now: datetime,
    max_sends: int = DEFAULT_MAX_SENDS,
    *,
    group: str | None = None,
) -> DataFrame:
    """Both lists in one pass: unsettled stubs plus a ``list`` column, ``resend`` or ``manual``."""
    from pyspark.sql import functions as F

    return unsettled_stubs(stubs, log, now, group=group).withColumn(
        "list",
        F.when(F.col("send_count") < max_sends, F.lit("resend")).otherwise(F.lit("manual")),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ReconcileSummary:
    """What a reconcile run found and wrote.

    ``by_topic`` rows are (topic, resend, manual), sorted by topic; empty unless the run was
    asked for them (``by_topic=True``).
    """

    now: datetime
    max_sends: int
    group: str | None
    resend: int
    manual: int
    by_topic: tuple[tuple[str, int, int], ...]
    resend_path: str
    manual_path: str
    seconds: float


def run_reconcile(
    spark: SparkSession,
    *,
    stubs: str,
    log: str,
    out: str,
    now: datetime | None = None,
    max_sends: int = DEFAULT_MAX_SENDS,
    group: str | None = None,
    stubs_table: str = "message_stub",
    log_table: str = "message_log",
    by_topic: bool = False,
) -> ReconcileSummary:
    """Read the stub and log tables, compute both lists, write ``out/resend`` and ``out/manual``.

    Both lists come out of one pass over the inputs: the job writes them partitioned by list
    into a scratch directory under ``out`` and then moves each partition into place (a rename
    on any Hadoop file system). Caching the lists and writing them twice cost about twice as
    much on the benchmark data. The two totals are observed while the lists are written (no
    extra pass); ``by_topic=True`` adds a per-topic breakdown read back from the written lists
    (one more, small job: ~0.3 s on the benchmark data).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if max_sends < 1:
        raise InvalidArgumentError(f"max_sends must be at least 1, got {max_sends}")
    started = time.perf_counter()
    moment = as_of(now)
    stub_df = read_table(
        spark, stubs, table=stubs_table, schema=MESSAGE_STUB_SCHEMA, partition_column="queue_offset"
    )
    log_df = read_table(
        spark,
        log,
        table=log_table,
        schema=MESSAGE_LOG_SCHEMA,
        columns=_LOG_COLUMNS,
        partition_column="queue_offset",
    )
    both = reconcile_lists(stub_df, log_df, moment, max_sends, group=group)
    base = out.rstrip("/")
    paths = {name: f"{base}/{name}" for name in ("resend", "manual")}
    scratch = f"{base}/_reconcile_{uuid.uuid4().hex[:12]}"
    totals = Observation("reconcile_totals")
    observed = both.observe(
        totals,
        F.count_if(F.col("list") == "resend").alias("resend"),
        F.count_if(F.col("list") == "manual").alias("manual"),
    )
    with _adaptive_execution_off(spark):
        _list_writer(observed).partitionBy("list").parquet(scratch)
    _move_lists_into_place(spark, scratch, paths, both)
    counts = totals.get
    topics = _counts_by_topic(spark, paths) if by_topic else ()
    return ReconcileSummary(
        now=moment,
        max_sends=max_sends,
        group=group,
        resend=int(counts["resend"]),
        manual=int(counts["manual"]),
        by_topic=topics,
        resend_path=paths["resend"],
        manual_path=paths["manual"],
        seconds=time.perf_counter() - started,
    )


def _list_writer(lists: DataFrame) -> DataFrameWriter:
    """An overwriting Parquet writer without the dictionaries and min/max statistics that cost
    time and help no reader of the lists (their columns of unique values)."""
    writer = lists.write.mode("overwrite")
    for column in _UNIQUE_VALUED_COLUMNS:
        writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    for column in _NO_STATISTICS_COLUMNS:
        writer = writer.option(f"parquet.column.statistics.enabled#{column}", "false")
    # Per-page byte counts and level histograms (parquet-mr 1.15+) help no reader of these lists.
    return writer.option("parquet.size.statistics.enabled", "false")


def _move_lists_into_place(
    spark: SparkSession, scratch: str, paths: dict[str, str], lists: DataFrame
) -> None:
    """Rename each ``list=<name>`` partition of ``scratch`` to its path, then drop ``scratch``;
    a list without rows gets an empty file set with the schema of ``lists`` (less ``list``)."""
    fs = _FileSystem(spark, scratch)
    for name, path in paths.items():
        fs.delete(path)
        if not fs.rename(f"{scratch}/list={name}", path):
            empty = spark.createDataFrame([], lists.drop("list").schema)
            write_parquet(empty.coalesce(1), path)
    fs.delete(scratch)


_ADAPTIVE_KEY: Final = "spark.sql.adaptive.enabled"
_adaptive_lock = threading.Lock()
#: session id -> (runs inside _adaptive_execution_off, the setting to restore after the last)
_adaptive_holders: dict[int, tuple[int, str]] = {}


@contextmanager
def _adaptive_execution_off(spark: SparkSession) -> Iterator[None]:
    """Run the write with adaptive query execution off, then restore the session's setting.

    The plan is broadcasts and scans with no shuffle worth adapting (only the per-queue maxima,
    a few rows). Without AQE all broadcasts are started at once and run beside the scans; with
    it, each waits for re-planning after the stage before (~6 % slower on the benchmark data).
    Runs overlapping on one session (threads) share the switch: the first saves the setting,
    the last restores it.
    """
    session = id(spark)
    with _adaptive_lock:
        holders, saved = _adaptive_holders.get(session, (0, ""))
        if holders == 0:
            saved = spark.conf.get(_ADAPTIVE_KEY, "true") or "true"
            spark.conf.set(_ADAPTIVE_KEY, "false")
        _adaptive_holders[session] = (holders + 1, saved)
    try:
        yield
    finally:
        with _adaptive_lock:
            holders, saved = _adaptive_holders.pop(session)
            if holders > 1:
                _adaptive_holders[session] = (holders - 1, saved)
            else:
                spark.conf.set(_ADAPTIVE_KEY, saved)


def _counts_by_topic(
    spark: SparkSession, paths: dict[str, str]
) -> tuple[tuple[str, int, int], ...]:
    from pyspark.sql import functions as F

    written = (
        spark.read.parquet(paths["resend"])
        .select("topic", F.lit("resend").alias("list"))
        .unionByName(
            spark.read.parquet(paths["manual"]).select("topic", F.lit("manual").alias("list"))
        )
    )
    rows = (
        written.groupBy("topic")
        .agg(
            F.count_if(F.col("list") == "resend").alias("resend"),
            F.count_if(F.col("list") == "manual").alias("manual"),
        )
        .orderBy("topic")
        .collect()
    )
    return tuple((str(r["topic"]), int(r["resend"]), int(r["manual"])) for r in rows)


class _FileSystem:
    """The few Hadoop FileSystem calls the job needs, so ``out`` may be local, HDFS, S3, ..."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._path = jvm.org.apache.hadoop.fs.Path
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._fs = self._path(path).getFileSystem(conf)

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst``; False when there is no ``src``, an error when the move fails."""
        source = self._path(src)
        if not self._fs.exists(source):
            return False
        if not self._fs.rename(source, self._path(dst)):
            # Hadoop reports some failures (object stores, permissions) as False, not an error.
            # Never let that pass for "this list is empty".
            raise OSError(f"could not move {src} to {dst}; the written list stays in {src}")
        return True
