"""The Spark data source ``pocketmq`` against a real broker: batch reads by offset range,
streaming reads across restarts, writes (batch and streaming, replayed) and read-back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession

from pocketmq.client import ClientConfig, Message, SendResult
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.errors import BrokerConnectionError, InvalidArgumentError
from pocketmq.pipeline.browse import QueueSpan
from pocketmq.pipeline.datasource import _limit, _ranges, _resolve
from pocketmq.pipeline.datasource_write import _message, _position_id, derive_message_id
from pocketmq.pipeline.options import DataSourceOptions
from pocketmq.pipeline.schemas import TOPIC_EXPORT_SCHEMA
from pocketmq.testing import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _create(address: str, topic: str, queues: int) -> None:
    with SyncAdmin(servers=address) as admin:
        admin.create_topic(topic, queues=queues)


def _send(address: str, messages: list[Message]) -> list[SendResult]:
    with SyncProducer(servers=address) as producer:
        return [producer.send(m) for m in messages]


def _reader(spark: SparkSession, address: str, topic: str, **options: str) -> DataFrame:
    return (
        spark.read.format("pocketmq")
        .option("servers", address)
        .option("topic", topic)
        .options(**options)
        .load()
    )


def _stream(
    spark: SparkSession,
    address: str,
    topic: str,
    checkpoint: Path,
    sink: Callable[[DataFrame, int], None],
    **options: str,
) -> None:
    """Run one ``availableNow`` query to the end (it must stop by itself)."""
    query = (
        spark.readStream.format("pocketmq")
        .option("servers", address)
        .option("topic", topic)
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(60), "availableNow query did not stop"
    assert query.exception() is None


# -- batch read ------------------------------------------------------------------------------


def test_batch_read_is_what_was_sent_per_queue_in_order(
    spark: SparkSession, broker: BrokerProcess
) -> None:
    topic = "ds-read"
    _create(broker.address, topic, 3)
    messages = [
        Message(
            topic=topic,
            body=f"b{i}".encode(),
            keys=(f"k{i}", "shared"),
            tag=f"t{i % 2}",
            properties={"n": str(i)},
        )
        for i in range(20)
    ] + [Message(topic=topic, body=f"g{i}".encode(), message_group="acct-9") for i in range(4)]
    sent = _send(broker.address, messages)
    by_position = {
        (s.queue_id, s.queue_offset): (s, m) for s, m in zip(sent, messages, strict=True)
    }

    df = _reader(spark, broker.address, topic)
    assert df.schema.names == TOPIC_EXPORT_SCHEMA.names
    assert df.rdd.getNumPartitions() == 3  # one per queue
    rows = df.collect()
    assert len(rows) == len(sent)
    for row in rows:
        s, m = by_position[(row.queue_id, row.queue_offset)]
        assert (row.message_id, row.topic, row.broker_name, row.body) == (
            s.message_id,
            topic,
            s.broker_name,
            m.body,
        )
        assert row.keys == (" ".join(m.keys) or None)
        assert (row.tag, row.message_group, row.delivery_attempt) == (m.tag, m.message_group, 1)
        assert row.properties == dict(m.properties)
        assert row.date == row.store_timestamp.strftime("%Y-%m-%d")
    # Within a partition (a queue) rows come in offset order, from 0, without gaps.
    per_queue: dict[int, list[int]] = {}
    for row in rows:
        per_queue.setdefault(row.queue_id, []).append(row.queue_offset)
    assert all(offsets == list(range(len(offsets))) for offsets in per_queue.values())

    # Explicit ranges: [start, end) per queue; unnamed queues from earliest / to latest.
    ranged = _reader(
        spark,
        broker.address,
        topic,
        startingOffsets=json.dumps({"broker-a": {"0": 2, "2": -1}}),
        endingOffsets=json.dumps({"broker-a": {"0": 4, "1": 1}}),
    )
    expected = {(0, 2), (0, 3), (1, 0)}
    assert {(r.queue_id, r.queue_offset) for r in ranged.collect()} == expected

    split = _reader(spark, broker.address, topic, maxRowsPerPartition="3")
    counts = Counter(s.queue_id for s in sent)
    assert split.rdd.getNumPartitions() == sum(-(-n // 3) for n in counts.values())
    assert sorted(r.message_id for r in split.collect()) == sorted(s.message_id for s in sent)


def test_reading_a_missing_topic_fails(spark: SparkSession, broker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="no-such-topic"):
        _reader(spark, broker.address, "no-such-topic").collect()


# -- streaming read --------------------------------------------------------------------------


def test_streaming_read_resumes_from_its_checkpoint_exactly_once(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "ds-stream"
    _create(broker.address, topic, 2)
    first = _send(broker.address, [Message(topic=topic, body=b"a%d" % i) for i in range(10)])
    seen: list[str] = []
    batches: list[int] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        rows = df.select("message_id").collect()
        assert len(rows) <= 4  # maxOffsetsPerTrigger
        seen.extend(r.message_id for r in rows)
        batches.append(batch_id)

    checkpoint = tmp_path / "checkpoint"
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    _stream(spark, broker.address, topic, checkpoint, sink, **options)
    assert sorted(seen) == sorted(s.message_id for s in first)
    assert batches == [0, 1, 2]  # 4 + 4 + 2, then availableNow stops

    more = _send(broker.address, [Message(topic=topic, body=b"b%d" % i) for i in range(7)])
    _stream(spark, broker.address, topic, checkpoint, sink, **options)
    assert sorted(seen) == sorted(s.message_id for s in first + more)  # each exactly once
    assert batches == [0, 1, 2, 3, 4]

    _stream(spark, broker.address, topic, checkpoint, sink, **options)  # nothing new
    assert len(seen) == 17

    # A new query starts at the latest offsets by default: nothing old is read.
    fresh: list[str] = []
    _stream(
        spark,
        broker.address,
        topic,
        tmp_path / "fresh",
        lambda df, _: fresh.extend(r.message_id for r in df.collect()),
    )
    assert fresh == []


# -- writing ---------------------------------------------------------------------------------


def test_write_then_read_back_and_a_rewrite_repeats_the_ids(
    spark: SparkSession, broker: BrokerProcess
) -> None:
    topic = "ds-write"
    _create(broker.address, topic, 2)
    rows = [
        Row(message_id="EXPLICIT-1", body=b"one", keys=None, tag=None, message_group=None),
        Row(message_id=None, body=b"two", keys="order-2", tag="created", message_group=None),
        Row(message_id=None, body=b"three", keys="order-3 c-7", tag=None, message_group=None),
        Row(message_id=None, body=b"f1", keys="f-1", tag=None, message_group="acct-1"),
        Row(message_id=None, body=b"f2", keys="f-2", tag=None, message_group="acct-1"),
    ]
    df = spark.createDataFrame(
        rows, "message_id string, body binary, keys string, tag string, message_group string"
    )
    df.write.format("pocketmq").option("servers", broker.address).option("topic", topic).mode(
        "append"
    ).save()

    back = {r.body: r for r in _reader(spark, broker.address, topic).collect()}
    assert set(back) == {b"one", b"two", b"three", b"f1", b"f2"}
    assert back[b"one"].message_id == "EXPLICIT-1"
    assert back[b"two"].message_id == derive_message_id(
        topic, ("order-2",), "created", None, b"two"
    )
    assert (back[b"three"].keys, back[b"two"].tag) == ("order-3 c-7", "created")
    fifo = (back[b"f1"], back[b"f2"])
    assert fifo[0].queue_id == fifo[1].queue_id  # one group, one queue, in order
    # in order, not necessarily adjacent: Spark writes its partitions in parallel, so another
    # partition's rows may land in the same queue between the two
    assert fifo[1].queue_offset > fifo[0].queue_offset
    assert fifo[0].message_group == "acct-1"

    # Writing the same rows again (a re-run, a retried task) re-sends the same ids.
    df.write.format("pocketmq").option("servers", broker.address).option("topic", topic).mode(
        "append"
    ).save()
    ids = Counter(r.message_id for r in _reader(spark, broker.address, topic).collect())
    assert sorted(ids.values()) == [2] * 5


def test_streaming_write_replayed_batch_resends_the_same_ids(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    source, target = "ds-copy-src", "ds-copy-dst"
    _create(broker.address, source, 2)
    _create(broker.address, target, 1)
    _send(broker.address, [Message(topic=source, body=b"c%d" % i) for i in range(6)])
    checkpoint = tmp_path / "checkpoint"

    def run() -> str:
        query = (
            spark.readStream.format("pocketmq")
            .option("servers", broker.address)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .load()
            .select("body")  # no id, no keys: ids come from (query, batch, partition, row)
            .writeStream.format("pocketmq")
            .option("servers", broker.address)
            .option("topic", target)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(60)
        assert query.exception() is None
        return str(query.id)

    query_id = run()
    copied = _reader(spark, broker.address, target).collect()
    assert sorted(r.body for r in copied) == [b"c%d" % i for i in range(6)]
    assert all(r.message_id != "" for r in copied)

    # Crash after the sink wrote but before Spark recorded the batch as done: batch 0 replays.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    assert run() == query_id  # the query id lives in the checkpoint
    again = _reader(spark, broker.address, target).collect()
    assert len(again) == 12  # sent twice (at least once) ...
    ids = Counter(r.message_id for r in again)
    assert sorted(ids.values()) == [2] * 6  # ... with the same ids: consumers deduplicate
    first_ids = {r.body: r.message_id for r in copied}
    assert all(first_ids[r.body] == r.message_id for r in again)


# -- pieces without Spark or a broker -----------------------------------------------------------


def _spans(*counts: tuple[int, int]) -> list[QueueSpan]:
    return [QueueSpan("broker-a", "addr", q, lo, hi) for q, (lo, hi) in enumerate(counts)]


def test_offsets_from_options() -> None:
    spans = _spans((0, 10), (5, 8))
    assert _resolve("earliest", spans, default=-1, name="x") == {"broker-a": {"0": 0, "1": 5}}
    assert _resolve("LATEST", spans, default=-2, name="x") == {"broker-a": {"0": 10, "1": 8}}
    given = json.dumps({"broker-a": {"1": 6}, "broker-b": {"0": 3}})
    assert _resolve(given, spans, default=-1, name="x") == {"broker-a": {"0": 10, "1": 6}}
    assert _resolve('{"broker-a": {"0": -2}}', spans, default=-1, name="x")["broker-a"]["0"] == 0
    for bad in ("soon", "[1]", '{"broker-a": {"0": "x"}}', '{"broker-a": {"0": -5}}'):
        with pytest.raises(InvalidArgumentError):
            _resolve(bad, spans, default=-1, name="x")


def test_read_limit_is_shared_fairly_and_deterministically() -> None:
    start = {"b": {"0": 0, "1": 10, "2": 5}}
    latest = {"b": {"0": 100, "1": 12, "2": 5}}
    assert _limit(start, latest, 10) == {"b": {"0": 8, "1": 12, "2": 5}}
    assert _limit(start, latest, 1000) == latest
    capped = _limit(start, latest, 1)
    assert sum(capped["b"][q] - start["b"][q] for q in capped["b"]) == 1
    assert _limit({}, {"b": {"0": 3, "1": 3}}, 4) == {"b": {"0": 2, "1": 2}}


def test_message_ids_for_written_rows() -> None:
    options = DataSourceOptions.parse({"servers": "h:1"})
    fields = frozenset({"body", "keys", "message_id", "tag", "properties", "topic"})

    def row(**values: Any) -> Row:
        base: dict[str, Any] = dict.fromkeys(fields)
        base.update(values)
        return Row(**base)

    explicit = _message(row(body=b"x", message_id="M1", topic="t"), fields, options, None)
    assert (explicit.message_id, explicit.topic) == ("M1", "t")
    keyed = _message(row(body="x", keys="a b", topic="t"), fields, options, None)
    assert keyed.message_id == derive_message_id("t", ("a", "b"), None, None, b"x")
    assert keyed.keys == ("a", "b")
    assert keyed.message_id != derive_message_id("t", ("a", "b"), None, None, b"y")
    position = ("query", "7", 1, 3)
    replayable = _message(row(body=b"x", topic="t"), fields, options, position)
    assert replayable.message_id == _position_id(*position, "t")
    fresh = _message(row(body=b"x", topic="t"), fields, options, None)
    assert fresh.message_id != _message(row(body=b"x", topic="t"), fields, options, None).message_id
    # The topic option wins over the column; reserved properties are dropped.
    overridden = DataSourceOptions.parse({"servers": "h:1", "topic": "other"})
    moved = _message(
        row(body=b"x", topic="t", properties={"RETRY_TOPIC": "t", "mine": "1"}),
        fields,
        overridden,
        None,
    )
    assert (moved.topic, dict(moved.properties)) == ("other", {"mine": "1"})
    with pytest.raises(InvalidArgumentError):
        _message(row(body=None, topic="t"), fields, options, None)


def test_partitions_per_queue_range() -> None:
    spans = _spans((0, 10), (0, 4))
    start = {"broker-a": {"0": 2}}
    end = {"broker-a": {"0": 9, "1": 4}, "broker-b": {"0": 0}}
    ranges = _ranges("t", spans, start, end, None)
    assert [(r.queue_id, r.start, r.end) for r in ranges] == [(0, 2, 9), (1, 0, 4)]
    split = _ranges("t", spans, start, end, 3)
    assert [(r.queue_id, r.start, r.end) for r in split] == [
        (0, 2, 5),
        (0, 5, 8),
        (0, 8, 9),
        (1, 0, 3),
        (1, 3, 4),
    ]
    with pytest.raises(BrokerConnectionError, match="broker-b"):
        _ranges("t", spans, {}, {"broker-b": {"0": 5}}, None)


# -- credentials -----------------------------------------------------------------------------


def test_reads_and_writes_with_the_keys_given_as_options(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A broker with authentication: the options' keys are used on the driver and in every
    task; without them the read is refused; the secret never shows in the options' text."""
    with BrokerProcess(tmp_path / "b", grpc_port=None,
                       extra_args=("--authentication",)) as guarded:  # fmt: skip
        command = [sys.executable, "-m", "pocketmq", "user", "create", "spark", "--secret",
                   "spark-secret", "--data-dir", str(guarded.data_dir / "data")]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        keys = ClientConfig(access_key="spark", secret_key="spark-secret")
        time.sleep(1.1)  # the broker reads the users file at most once a second
        with SyncAdmin(servers=guarded.address, client=keys) as admin:
            admin.create_topic("secured", queues=2)
        credentials = {"accessKey": "spark", "secretKey": "spark-secret"}
        rows = spark.createDataFrame([Row(body=b"one"), Row(body=b"two")])
        (
            rows.write.format("pocketmq")
            .option("servers", guarded.address)
            .option("topic", "secured")
            .options(**credentials)
            .mode("append")
            .save()
        )
        back = _reader(spark, guarded.address, "secured", **credentials).collect()
        assert sorted(r.body for r in back) == [b"one", b"two"]
        with pytest.raises(Exception, match=r"requires authentication"):  # Spark wraps it
            _reader(spark, guarded.address, "secured").collect()
    parsed = DataSourceOptions.parse(
        {"servers": "h:1", "accessKey": "spark", "secretKey": "spark-secret"}
    )
    assert "spark-secret" not in repr(parsed)
    assert parsed.client().secret_key == "spark-secret"
