"""Seam for the Spark Python data source ``pocketmq`` and for ``pocketmq export`` (not built yet).

Both need the broker SDK (routes, pull by offset range, per-queue offsets), which lands on another
branch. What is fixed already, so the pieces fit when they arrive:

* The data source registers under :data:`DATA_SOURCE_NAME` (``spark.read.format("pocketmq")``,
  ``spark.readStream.format("pocketmq")``, ``df.write.format("pocketmq")``) and will live in this
  module: batch reads with one partition per (broker, queue, offset range), streaming reads with
  per-queue offsets (restartable from the checkpoint, ``availableNow`` supported), and writes that
  carry message keys so a replayed micro-batch can be deduplicated downstream.
* Rows it reads have the columns of :data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA`
  (the ``date`` column included), so a job written against a Parquet export runs unchanged on a
  live topic.
* ``pocketmq export`` (a ``pocketmq.cli`` command) will write topics and DLQ topics with
  :data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA` and the attempt history with
  :data:`~pocketmq.pipeline.schemas.ATTEMPT_HISTORY_SCHEMA`, as Parquet partitioned by
  :data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_PARTITIONING` — exactly what
  ``pocketmq pipeline audit`` and ``dlq-report`` read today.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DATA_SOURCE_NAME", "OPTION_ENDPOINTS", "OPTION_STARTING_OFFSETS", "OPTION_TOPIC"]

DATA_SOURCE_NAME: Final = "pocketmq"
#: Planned options of the data source.
OPTION_ENDPOINTS: Final = "endpoints"  # name server or broker address, host:port
OPTION_TOPIC: Final = "topic"
OPTION_STARTING_OFFSETS: Final = "startingOffsets"  # "earliest" | "latest" | JSON per queue
