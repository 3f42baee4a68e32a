"""The Spark Python data source ``pocketmq``: topics as DataFrames (batch and streaming), and
DataFrames into topics.

::

    spark.read.format("pocketmq").option("servers", "127.0.0.1:10911").option("topic", "orders")
        .load()                                   # every message stored now, one partition a queue
    spark.readStream.format("pocketmq").option("servers", ...).option("topic", "orders").load()
    df.write.format("pocketmq").option("servers", ...).option("topic", "orders").mode("append")
        .save()                                   # and df.writeStream.format("pocketmq")...

:func:`pocketmq.pipeline.spark_session` registers the source; elsewhere call
:func:`register_data_source`.

**Reading.** Rows have the columns of :data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA`
(``date`` included), so a job written against a Parquet export (``pocketmq export``) runs
unchanged on a live topic. Messages are read with the broker's ``BROWSE`` request, which moves
no consumer offset: reading a topic has no effect on any consumer group. Each partition is one
queue of one broker and an offset range ``[start, end)`` in it, read in offset order.

**Offsets** are JSON per broker and queue, ``{"broker-a": {"0": 42, "1": 17}}``: the next offset
to read in each queue (``-2`` = earliest, ``-1`` = latest, like Kafka). Queues left out start at
the earliest offset and end at the latest. A streaming query keeps the same JSON in its
checkpoint; queues added while it runs are read from their beginning.

**Streaming** (micro-batch): ``latestOffset`` asks every broker for its queues' offsets;
``maxOffsetsPerTrigger`` caps a micro-batch (shared fairly among the queues with new messages);
``Trigger.AvailableNow`` reads what was there when the query started, in micro-batches of that
size, then stops. A restarted query continues from the offsets in its checkpoint, so every message
is read once per query — Spark's checkpoint is the source of truth and the source keeps no state
of its own (``commit`` is a no-op: Spark calls it one batch late anyway).

**Writing** sends each row as a message, one producer per Spark task. Columns: ``body``
(binary or text, required), ``topic`` (unless the ``topic`` option is set, which wins — so a
DataFrame read from one topic can be written to another), ``keys`` (space-separated text or an
array), ``tag``, ``message_group`` (FIFO), ``properties`` (map; reserved names are dropped) and
``message_id``. A Spark task that fails is run again and sends its rows again, and a streaming
micro-batch can be replayed after a crash: both re-send the same message ids, so an idempotent
consumer (:mod:`pocketmq.reliability`) sees each message once. The id of a row is

1. its ``message_id`` column when set;
2. otherwise, for rows with ``keys``, a hash of (topic, keys, tag, message group, body): the same
   keyed message always gets the same id (updates to one key differ in body, so they stay
   distinct);
3. otherwise, in a streaming query, a hash of (query id, batch id, partition, row number), which
   a replay of the same micro-batch reproduces;
4. otherwise (a batch write of rows without keys or ids) a fresh id: such writes are not
   idempotent.

Spark runs the reading and writing code in separate Python worker processes: every SDK client is
opened inside ``partitions``/``read``/``write`` through the blocking facade and closed there;
nothing holding a connection is ever pickled. Workers must be able to import ``pocketmq``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pocketmq.errors import BrokerConnectionError, InvalidArgumentError
from pocketmq.pipeline.browse import QueueSpan, browse_range, messages_table
from pocketmq.pipeline.browse import queue_spans as _queue_spans
from pocketmq.pipeline.datasource_write import BatchWriter, StreamWriter, derive_message_id
from pocketmq.pipeline.options import (
    OPTION_ENDING_OFFSETS,
    OPTION_STARTING_OFFSETS,
    DataSourceOptions,
)
from pocketmq.pipeline.schemas import TOPIC_EXPORT_SCHEMA, spark_ddl

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "DATA_SOURCE_NAME",
    "Offsets",
    "PocketMQDataSource",
    "QueueRange",
    "derive_message_id",
    "register_data_source",
]

DATA_SOURCE_NAME: Final = "pocketmq"
EARLIEST: Final = -2
LATEST: Final = -1

#: Offsets as Spark checkpoints them: broker name -> queue id (text) -> next offset.
Offsets = dict[str, dict[str, int]]


def register_data_source(spark: SparkSession) -> None:
    """Make ``format("pocketmq")`` available in ``spark`` (registering again is harmless)."""
    spark.dataSource.register(PocketMQDataSource)


def _resolve(spec: str, spans: Sequence[QueueSpan], *, default: int, name: str) -> Offsets:
    """Offsets for every queue in ``spans`` from ``earliest``/``latest`` or offsets JSON."""
    if spec.lower() in ("earliest", "latest"):
        given: Mapping[str, Mapping[str, Any]] = {}
        default = EARLIEST if spec.lower() == "earliest" else LATEST
    else:
        try:
            given = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"option {name} must be earliest, latest or JSON like "
                f'{{"broker-a": {{"0": 42}}}}: {exc}'
            ) from None
        if not isinstance(given, dict) or not all(
            isinstance(q, dict) and all(isinstance(v, int) for v in q.values())
            for q in given.values()
        ):
            raise InvalidArgumentError(
                f'option {name}: expected {{"broker": {{"queue id": offset}}}}, got {spec}'
            )
    out: Offsets = {}
    for span in spans:
        value = given.get(span.broker_name, {}).get(str(span.queue_id), default)
        if value == EARLIEST:
            value = span.min_offset
        elif value == LATEST:
            value = span.max_offset
        elif value < 0:
            raise InvalidArgumentError(f"option {name}: offset {value} is not -2, -1 or >= 0")
        out.setdefault(span.broker_name, {})[str(span.queue_id)] = int(value)
    return out


def _get(offsets: Mapping[str, Mapping[str, int]], broker: str, queue_id: int) -> int | None:
    return offsets.get(broker, {}).get(str(queue_id))


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one queue on one broker."""

    topic: str
    broker_name: str
    address: str
    queue_id: int
    start: int
    end: int


def _ranges(
    topic: str,
    spans: Sequence[QueueSpan],
    start: Mapping[str, Mapping[str, int]],
    end: Mapping[str, Mapping[str, int]],
    split: int | None,
) -> list[QueueRange]:
    """The partitions reading ``[start, end)`` of every queue in ``end``, in broker/queue order.

    A queue with offsets to read whose broker is not in ``spans`` (it went away since the end
    offsets were taken) is an error, never a silent gap: the micro-batch fails and is retried.
    """
    addresses = {s.broker_name: s.address for s in spans}
    wanted = sorted((b, int(q), hi) for b, queues in end.items() for q, hi in queues.items())
    out: list[QueueRange] = []
    for broker, queue_id, hi in wanted:
        lo = _get(start, broker, queue_id)
        lo = 0 if lo is None else lo  # a queue added since: all of it is new
        if hi <= lo:
            continue
        address = addresses.get(broker)
        if address is None:
            raise BrokerConnectionError(
                f"broker {broker!r} holds offsets {lo}..{hi} of queue {queue_id} of topic "
                f"{topic!r} but did not answer"
            )
        step = split or (hi - lo)
        for at in range(lo, hi, step):
            out.append(QueueRange(topic, broker, address, queue_id, at, min(hi, at + step)))
    return out


def _read(
    options: DataSourceOptions, part: QueueRange, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Read one partition as Arrow batches shaped like ``schema`` (Spark's Arrow types)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    if part.end <= part.start:
        return
    with options.admin() as admin:
        for page in browse_range(
            admin,
            part.address,
            part.topic,
            part.queue_id,
            part.start,
            part.end,
            page_size=options.page_size,
        ):
            table = messages_table(page, part.broker_name).select(target.names).cast(target)
            yield from table.to_batches()


class _BatchReader(DataSourceReader):
    def __init__(self, options: DataSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        topic = self.options.require_topic()
        with self.options.admin() as admin:
            spans = _queue_spans(admin, topic)
        start = _resolve(
            self.options.starting, spans, default=EARLIEST, name=OPTION_STARTING_OFFSETS
        )
        end = _resolve(self.options.ending, spans, default=LATEST, name=OPTION_ENDING_OFFSETS)
        ranges = _ranges(topic, spans, start, end, self.options.max_rows_per_partition)
        # Spark wants at least one partition; an empty range reads nothing.
        return ranges or [QueueRange(topic, "", "", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return _read(self.options, partition, self.schema)


def _limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """``latest`` cut so that at most ``max_rows`` offsets lie between ``start`` and it, shared
    fairly (water-filling, in broker/queue order) among the queues that have new messages."""
    keys = sorted((b, q) for b, queues in latest.items() for q in queues)
    lo = {k: start.get(k[0], {}).get(k[1], 0) for k in keys}
    room = {k: max(0, latest[k[0]][k[1]] - lo[k]) for k in keys}
    take = dict.fromkeys(keys, 0)
    budget = max_rows
    active = [k for k in keys if room[k] > 0]
    while budget > 0 and active:
        share = max(1, budget // len(active))
        for k in list(active):
            n = min(share, room[k] - take[k], budget)
            take[k] += n
            budget -= n
            if take[k] >= room[k]:
                active.remove(k)
            if budget == 0:
                break
    out: Offsets = {}
    for b, q in keys:
        out.setdefault(b, {})[q] = lo[(b, q)] + take[(b, q)]
    return out


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: DataSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this

    def _spans(self) -> list[QueueSpan]:
        with self.options.admin() as admin:
            return _queue_spans(admin, self.options.require_topic())

    def _latest(self) -> Offsets:
        return _resolve("latest", self._spans(), default=LATEST, name="latest")

    def initialOffset(self) -> Offsets:
        return _resolve(
            self.options.starting, self._spans(), default=EARLIEST, name=OPTION_STARTING_OFFSETS
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger is not None:
            return ReadMaxRows(self.options.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self._latest()
        out: Offsets = {}
        for broker, queues in latest.items():
            for queue, offset in queues.items():
                begin = start.get(broker, {}).get(queue, 0)
                if self._target is not None:
                    # queues that appeared after the target was taken are not read in this run
                    offset = min(offset, self._target.get(broker, {}).get(queue, begin))
                out.setdefault(broker, {})[queue] = max(begin, offset)
        for broker, queues in start.items():  # never forget a queue (a broker may be away)
            for queue, offset in queues.items():
                out.setdefault(broker, {}).setdefault(queue, offset)
        if isinstance(limit, ReadMaxRows):
            out = _limit(start, out, limit.max_rows)
        return out

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        if start == end:
            return []
        return _ranges(
            self.options.require_topic(),
            self._spans(),
            start,
            end,
            self.options.max_rows_per_partition,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return _read(self.options, partition, self.schema)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the query's checkpoint holds the offsets, not the broker."""


# -- the data source -------------------------------------------------------------------------


class PocketMQDataSource(DataSource):
    """``format("pocketmq")``: see the module documentation for the options."""

    @classmethod
    def name(cls) -> str:
        """The format name Spark looks up: ``spark.read.format("pocketmq")``."""
        return DATA_SOURCE_NAME

    def schema(self) -> str:
        """The export schema, so that a job written against ``pocketmq export`` files runs
        unchanged on a live topic.
        """
        return spark_ddl(TOPIC_EXPORT_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Batch reads: the options are parsed once here, on the driver, and travel to the tasks as
        plain values.
        """
        return _BatchReader(DataSourceOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Micro-batch reads; the offsets live in the query's checkpoint, not on the broker."""
        return _StreamReader(DataSourceOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Batch writes: every task sends its rows with a producer of its own."""
        return BatchWriter(DataSourceOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Streaming writes, with ids a replayed micro-batch reproduces (see the module
        documentation).
        """
        return StreamWriter(DataSourceOptions.parse(self.options))
