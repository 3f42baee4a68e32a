"""The shapes of the data the pipelines read and write, as pyarrow schemas.

These constants are contracts shared with other parts of pocketmq:

* :data:`MESSAGE_STUB_SCHEMA` and :data:`MESSAGE_LOG_SCHEMA` mirror the reliability toolkit's
  ``message_stub`` and ``message_log`` tables (the outbox and the consumer's receipt log). Their
  Parquet form is what ``pocketmq pipeline demo-data`` writes; over JDBC the same columns are read
  from the tables.
* :data:`TOPIC_EXPORT_SCHEMA` is what ``pocketmq export`` writes for a topic or a DLQ topic,
  partitioned by ``topic``/``date``; the Spark data source ``pocketmq`` produces rows of the same
  shape.
* :data:`ATTEMPT_HISTORY_SCHEMA` is the broker's delivery-attempt ledger export (the internal
  topic :data:`HISTORY_TOPIC`): one row per delivery attempt of a message to a consumer group,
  with its outcome; ``pocketmq export --history`` partitions it by ``date``.

Timestamps in the reliability tables are UTC wall-clock values without a zone (the tables'
``TIMESTAMP`` columns); broker exports carry zone-aware UTC instants in milliseconds.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from pocketmq import names
from pocketmq import properties as props
from pocketmq.reliability.stub import LogStatus, StubStatus

__all__ = [
    "ATTEMPT_HISTORY_SCHEMA",
    "ATTEMPT_OUTCOMES",
    "DLQ_TOPIC_PREFIX",
    "FAILED_OUTCOMES",
    "HISTORY_TOPIC",
    "LOG_STATUSES",
    "MESSAGE_LOG_SCHEMA",
    "MESSAGE_STUB_SCHEMA",
    "PROPERTY_DLQ_REASON",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_RETRY_TOPIC",
    "RETRY_TOPIC_PREFIX",
    "STUB_STATUSES",
    "TOPIC_EXPORT_PARTITIONING",
    "TOPIC_EXPORT_SCHEMA",
    "spark_ddl",
]

#: ``message_stub.status`` values (the toolkit's :class:`~pocketmq.reliability.StubStatus`).
STUB_STATUSES: Final = tuple(status.value for status in StubStatus)
#: ``message_log.status`` values (the toolkit's :class:`~pocketmq.reliability.LogStatus`).
LOG_STATUSES: Final = tuple(status.value for status in LogStatus)

MESSAGE_STUB_SCHEMA: Final = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("tag", pa.string()),
        pa.field("keys", pa.string()),  # space-separated
        pa.field("content", pa.binary(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("send_count", pa.int32(), nullable=False),
        pa.field("broker_name", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("next_resend_at", pa.timestamp("us"), nullable=False),
        pa.field("created_at", pa.timestamp("us"), nullable=False),
        pa.field("updated_at", pa.timestamp("us"), nullable=False),
        pa.field("last_error", pa.string()),
    ]
)

MESSAGE_LOG_SCHEMA: Final = pa.schema(
    [
        pa.field("consumer_group", pa.string(), nullable=False),
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("broker_name", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("receive_count", pa.int32(), nullable=False),
        pa.field("created_at", pa.timestamp("us"), nullable=False),  # first receipt
        pa.field("consumed_at", pa.timestamp("us")),
    ]
)

#: Topic (and DLQ topic) export, partitioned by ``topic`` then ``date`` (``YYYY-MM-DD`` of
#: ``store_timestamp`` in UTC).
TOPIC_EXPORT_SCHEMA: Final = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("body", pa.binary()),
        pa.field("tag", pa.string()),
        pa.field("keys", pa.string()),  # space-separated
        pa.field("message_group", pa.string()),
        pa.field("delivery_attempt", pa.int32()),
        pa.field("born_timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("store_timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("broker_name", pa.string()),
        pa.field("date", pa.string(), nullable=False),
    ]
)
TOPIC_EXPORT_PARTITIONING: Final = ("topic", "date")

#: Prefixes of the per-group system topics (docs/semantics.md "Consumer retry, delays and dead
#: letters").
RETRY_TOPIC_PREFIX: Final = names.RETRY_PREFIX
DLQ_TOPIC_PREFIX: Final = names.DLQ_PREFIX
#: Properties the broker sets on a message it moves to a retry or DLQ topic.
PROPERTY_RETRY_TOPIC: Final = props.RETRY_TOPIC
PROPERTY_ORIGIN_MESSAGE_ID: Final = props.ORIGIN_MESSAGE_ID
#: Why the broker dead-lettered a message (set on the copy in ``%DLQ%<group>``).
PROPERTY_DLQ_REASON: Final = props.DLQ_REASON
#: The broker's attempt ledger: one queue per broker, each record an ``Attempt``.
HISTORY_TOPIC: Final = names.HISTORY_TOPIC

#: ``attempt_history.outcome`` values; all but SUCCESS and DLQ leave a message due again.
#: REDRIVEN is an operator re-sending a dead letter (``pocketmq dlq resend``), not a delivery.
ATTEMPT_OUTCOMES: Final = (
    "SUCCESS",
    "RECONSUME_LATER",
    "EXCEPTION",
    "TIMEOUT",
    "INVISIBLE_EXPIRED",
    "DLQ",
    "REDRIVEN",
)
FAILED_OUTCOMES: Final = ("RECONSUME_LATER", "EXCEPTION", "TIMEOUT", "INVISIBLE_EXPIRED")

#: One row per delivery attempt of a message to a consumer group. ``message_group`` is the FIFO
#: group of the message (null for normal messages); ``finished_at`` is null while the attempt is in
#: flight; ``error`` holds the exception text or the consumer's reason, null on success.
ATTEMPT_HISTORY_SCHEMA: Final = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("consumer_group", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("message_group", pa.string()),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("consumer", pa.string()),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("error", pa.string()),
        pa.field("delivered_at", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("finished_at", pa.timestamp("ms", tz="UTC")),
    ]
)


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL string for one of these schemas (zone-less timestamps become TIMESTAMP_NTZ).

    Reading an export with this explicit schema keeps the partition columns as text (Spark would
    otherwise infer ``date`` as a DATE) and skips schema inference over many files.
    """
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "STRING"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BINARY"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    if pa.types.is_map(t):
        return f"MAP<{_spark_type(t.key_type)}, {_spark_type(t.item_type)}>"
    raise TypeError(f"no Spark type for {t}")
