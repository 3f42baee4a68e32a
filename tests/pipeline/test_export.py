"""``pocketmq export`` against a real broker: a topic, a DLQ filled by a failing consumer, the
attempt history; re-runs; and the audit and DLQ jobs run on what it wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pocketmq.cli import main
from pocketmq.client import Message, MessageView, SendResult
from pocketmq.client.sync import SyncAdmin, SyncProducer, SyncPushConsumer
from pocketmq.pipeline.export import (
    DLQ_DIR,
    HISTORY_DIR,
    TOPICS_DIR,
    _uncovered,
    export_to_parquet,
    exported_ranges,
)
from pocketmq.pipeline.schemas import (
    ATTEMPT_HISTORY_SCHEMA,
    MESSAGE_LOG_SCHEMA,
    TOPIC_EXPORT_SCHEMA,
)
from pocketmq.testing import BrokerProcess, NameServerProcess

from ..scratch import scratch_dir
from .conftest import FAST_BROKER

pytestmark = pytest.mark.integration

TOPIC = "exp-orders"
GROUP = "exp-billing"  # max_retries=0 and a listener that always fails: all to the DLQ
FIFO_GROUP = "acct-1"


@dataclass
class Scenario:
    address: str
    sent: list[SendResult]
    grouped: set[str]  # ids of the messages sent with a message group


def _export_rows(
    path: Path, partitions: tuple[str, ...] = ("topic", "date")
) -> list[dict[str, Any]]:
    """The rows under an export root, partition columns (as text) included."""
    partitioning = ds.partitioning(pa.schema([(p, pa.string()) for p in partitions]), flavor="hive")
    dataset = ds.dataset(path, format="parquet", partitioning=partitioning)
    return dataset.to_table().to_pylist()


def _wait(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def scenario(broker: BrokerProcess) -> Scenario:
    address = broker.address
    with SyncAdmin(servers=address) as admin:
        admin.create_topic(TOPIC, queues=2)
        admin.create_group(GROUP, max_retries=0)
        with SyncProducer(servers=address) as producer:
            sent = [
                producer.send(Message(topic=TOPIC, body=f"m{i}".encode(), keys=(f"k{i}",), tag="t"))
                for i in range(6)
            ]
            grouped = [
                producer.send(Message(topic=TOPIC, body=f"g{i}".encode(), message_group=FIFO_GROUP))
                for i in range(2)
            ]

        def fail(messages: list[MessageView]) -> None:
            raise RuntimeError(f"cannot bill {messages[0].message_id}")

        consumer = SyncPushConsumer(GROUP, TOPIC, fail, servers=address)
        try:
            _wait(lambda: len(admin.run(lambda a: a.dead_letters(GROUP))) == 8)
        finally:
            consumer.close()
    return Scenario(address, sent + grouped, {r.message_id for r in grouped})


def test_export_writes_topic_dlq_and_history(scenario: Scenario, tmp_path: Path) -> None:
    summary = export_to_parquet(
        tmp_path, servers=scenario.address, topics=[TOPIC], dlq_groups=[GROUP], history=True
    )
    by_kind = {s.kind: s for s in summary.sources}
    assert (by_kind["topic"].rows, by_kind["topic"].queues) == (8, 2)
    assert by_kind["dlq"].rows == 8

    topic_rows = _export_rows(tmp_path / TOPICS_DIR)
    got = {(r["queue_id"], r["queue_offset"]): r for r in topic_rows}
    assert set(got) == {(s.queue_id, s.queue_offset) for s in scenario.sent}
    for s in scenario.sent:
        row = got[(s.queue_id, s.queue_offset)]
        assert (row["message_id"], row["topic"], row["broker_name"]) == (
            s.message_id,
            TOPIC,
            s.broker_name,
        )
        if s.message_id in scenario.grouped:
            assert (row["message_group"], row["keys"], row["tag"]) == (FIFO_GROUP, None, None)
        else:
            assert row["body"].decode() == f"m{row['keys'][1:]}"
            assert (row["message_group"], row["tag"]) == (None, "t")
        assert row["date"] == row["store_timestamp"].strftime("%Y-%m-%d")

    # Dead letters: stored in %DLQ%<group>, original topic and reason kept as properties.
    dlq_rows = _export_rows(tmp_path / DLQ_DIR)
    assert {r["message_id"] for r in dlq_rows} == {s.message_id for s in scenario.sent}
    for row in dlq_rows:
        props = dict(row["properties"])
        assert row["topic"] == f"%DLQ%{GROUP}"
        assert props["RETRY_TOPIC"] == TOPIC
        assert props["DLQ_REASON"]
        assert props["ORIGIN_MESSAGE_ID"] == row["message_id"]
    assert sorted(r["queue_offset"] for r in dlq_rows) == list(range(8))

    # History: one failed attempt and one DLQ move per message, FIFO group recorded.
    history = _export_rows(tmp_path / HISTORY_DIR, ("date",))
    mine = [r for r in history if r["consumer_group"] == GROUP]
    assert sorted(r["outcome"] for r in mine) == ["DLQ"] * 8 + ["EXCEPTION"] * 8
    for row in mine:
        expected_group = FIFO_GROUP if row["message_id"] in scenario.grouped else None
        assert row["message_group"] == expected_group
        assert row["topic"] == TOPIC
        if row["outcome"] == "EXCEPTION":
            assert "cannot bill" in row["error"]
            assert row["consumer"]
        assert row["finished_at"] >= row["delivered_at"]
        assert row["date"] == row["delivered_at"].strftime("%Y-%m-%d")

    # One file per queue (one date, contiguous offsets), named by queue and offset range;
    # partition columns live in the directory names only.
    per_queue: dict[int, int] = {}
    for s in scenario.sent:
        per_queue[s.queue_id] = per_queue.get(s.queue_id, 0) + 1
    files = sorted((tmp_path / TOPICS_DIR).rglob("*.parquet"))
    assert sorted(f.name for f in files) == [
        f"part-{q}-0-{n}-broker-a.parquet" for q, n in sorted(per_queue.items())
    ]
    for f in files:
        assert pq.read_schema(f).names == [
            n for n in TOPIC_EXPORT_SCHEMA.names if n not in ("topic", "date")
        ]
    history_files = list((tmp_path / HISTORY_DIR).rglob("*.parquet"))
    assert pq.read_schema(history_files[0]).names == ATTEMPT_HISTORY_SCHEMA.names


def test_reruns_export_only_new_offsets(scenario: Scenario, tmp_path: Path) -> None:
    first = export_to_parquet(tmp_path, servers=scenario.address, topics=[TOPIC])
    files = sorted((tmp_path / TOPICS_DIR).rglob("*.parquet"))
    again = export_to_parquet(tmp_path, servers=scenario.address, topics=[TOPIC])
    assert (again.rows, again.sources[0].already) == (0, first.rows)
    assert sorted((tmp_path / TOPICS_DIR).rglob("*.parquet")) == files

    topic = f"{TOPIC}-more"
    with SyncAdmin(servers=scenario.address) as admin:
        admin.create_topic(topic, queues=1)
    with SyncProducer(servers=scenario.address) as producer:
        for i in range(3):
            producer.send(Message(topic=topic, body=b"x%d" % i))
        export_to_parquet(tmp_path, servers=scenario.address, topics=[topic])
        for i in range(3, 5):
            producer.send(Message(topic=topic, body=b"x%d" % i))
    later = export_to_parquet(tmp_path, servers=scenario.address, topics=[topic])
    assert (later.rows, later.sources[0].already) == (2, 3)
    directory = tmp_path / TOPICS_DIR / f"topic={topic}"
    assert exported_ranges(directory) == {("broker-a", 0): [(0, 3), (3, 5)]}
    rows = _export_rows(tmp_path / TOPICS_DIR)
    offsets = sorted(r["queue_offset"] for r in rows if r["topic"] == topic)
    assert offsets == [0, 1, 2, 3, 4]  # every message once


def test_since_skips_older_messages_and_a_later_run_fills_them_in(
    scenario: Scenario, tmp_path: Path
) -> None:
    future = datetime.now(UTC) + timedelta(days=1)
    skipped = export_to_parquet(tmp_path, servers=scenario.address, topics=[TOPIC], since=future)
    assert (skipped.rows, skipped.sources[0].skipped) == (0, 8)
    assert (tmp_path / TOPICS_DIR / "empty.parquet").exists()  # readers still find a schema
    full = export_to_parquet(tmp_path, servers=scenario.address, topics=[TOPIC])
    assert full.rows == 8
    assert not (tmp_path / TOPICS_DIR / "empty.parquet").exists()


def test_uncovered_ranges() -> None:
    assert list(_uncovered(0, 10, [])) == [(0, 10)]
    assert list(_uncovered(0, 10, [(0, 3), (5, 7)])) == [(3, 5), (7, 10)]
    assert list(_uncovered(4, 10, [(0, 6), (6, 12)])) == []
    assert list(_uncovered(5, 5, [])) == []


def test_export_command(scenario: Scenario, tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["export", "--out", str(tmp_path), "--server", scenario.address]
    result = runner.invoke(main, [*args, "--topic", TOPIC, "--dlq", GROUP, "--history"])
    assert result.exit_code == 0, result.output
    assert TOPIC in result.output
    assert f"%DLQ%{GROUP}" in result.output
    assert (tmp_path / HISTORY_DIR).is_dir()

    missing = runner.invoke(main, [*args, "--topic", "no-such-topic"])
    assert missing.exit_code == 1
    assert "no-such-topic" in missing.output
    nothing = runner.invoke(main, args)
    assert nothing.exit_code == 2

    every = runner.invoke(main, [*args, "--all-topics"])
    assert every.exit_code == 0, every.output
    assert TOPIC in every.output
    assert "%" not in every.output  # no %RETRY%, %DLQ% or %SYS% topics


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two brokers behind one name server: (name server address, broker-a address)."""
    with scratch_dir(tmp_path_factory, "cluster") as root, NameServerProcess(root) as namesrv:
        brokers = [
            BrokerProcess(
                root / name,
                namesrv=namesrv.address,
                broker_name=name,
                config=FAST_BROKER,
                grpc_port=None,
            )
            for name in ("broker-a", "broker-b")
        ]
        try:
            yield namesrv.address, brokers[0].address
        finally:
            for broker in brokers:
                broker.stop()


@pytest.mark.spark
def test_export_and_read_across_brokers(
    spark: SparkSession, cluster: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, broker_a = cluster
    topic = "exp-spread"
    with SyncAdmin(servers=broker_a) as admin:  # creates the topic on every broker
        admin.create_topic(topic, queues=3)
    with SyncProducer(servers=broker_a) as producer:
        sent = [producer.send(Message(topic=topic, body=b"s%d" % i)) for i in range(24)]
    assert {s.broker_name for s in sent} == {"broker-a", "broker-b"}
    expected = {(s.broker_name, s.queue_id, s.queue_offset): s.message_id for s in sent}

    summary = export_to_parquet(tmp_path, servers=broker_a, topics=[topic])
    assert (summary.rows, summary.sources[0].queues) == (24, 6)
    rows = _export_rows(tmp_path / TOPICS_DIR)
    assert {
        (r["broker_name"], r["queue_id"], r["queue_offset"]): r["message_id"] for r in rows
    } == (expected)
    ranges = exported_ranges(tmp_path / TOPICS_DIR / f"topic={topic}")
    assert {broker for broker, _ in ranges} == {"broker-a", "broker-b"}

    # The data source, pointed at the name server, reads every queue of both brokers.
    df = spark.read.format("pocketmq").option("servers", namesrv).option("topic", topic).load()
    assert df.rdd.getNumPartitions() == len({k[:2] for k in expected})
    got = {(r.broker_name, r.queue_id, r.queue_offset): r.message_id for r in df.collect()}
    assert got == expected


@pytest.mark.spark
def test_audit_and_dlq_report_run_on_the_export(
    spark: SparkSession, scenario: Scenario, tmp_path: Path
) -> None:
    from pocketmq.pipeline.audit import run_audit
    from pocketmq.pipeline.dlq import run_dlq_report

    out = tmp_path / "export"
    export_to_parquet(
        out, servers=scenario.address, topics=[TOPIC], dlq_groups=[GROUP], history=True
    )
    now = datetime.now(UTC).replace(tzinfo=None) + timedelta(minutes=30)

    report = run_dlq_report(
        spark,
        dlq=str(out / DLQ_DIR),
        attempts=str(out / HISTORY_DIR),
        out=str(tmp_path / "dlq-report"),
        now=now,
        group=GROUP,
    )
    [row] = report.rows
    assert (row["consumer_group"], row["dlq_messages"]) == (GROUP, 8)
    assert (row["attempts"], row["failed_attempts"]) == (16, 16)
    ageing = pq.read_table(tmp_path / "dlq-report" / "ageing").to_pylist()
    assert [(a["original_topic"], a["age_bucket"], a["messages"]) for a in ageing] == [
        (TOPIC, "<1h", 8)
    ]

    # A consumer log saying another group consumed five of the eight messages: three are lost.
    consumed = sorted(scenario.sent, key=lambda s: (s.queue_id, s.queue_offset))[:5]
    stamp = datetime.now(UTC).replace(tzinfo=None)
    log = pa.Table.from_pylist(
        [
            {
                "consumer_group": "exp-shipping",
                "message_id": s.message_id,
                "topic": TOPIC,
                "broker_name": s.broker_name,
                "queue_id": s.queue_id,
                "queue_offset": s.queue_offset,
                "status": "CONSUMED",
                "receive_count": 1,
                "created_at": stamp,
                "consumed_at": stamp,
            }
            for s in consumed
        ],
        schema=MESSAGE_LOG_SCHEMA,
    )
    (tmp_path / "log").mkdir()
    pq.write_table(log, tmp_path / "log" / "part-0.parquet")
    audit = run_audit(
        spark,
        export=str(out / TOPICS_DIR),
        log=str(tmp_path / "log"),
        out=str(tmp_path / "audit"),
        now=now,
        grace=60,
    )
    [summary] = audit.rows
    assert (summary["topic"], summary["consumer_group"]) == (TOPIC, "exp-shipping")
    assert (summary["stored"], summary["consumed"], summary["lost"]) == (8, 5, 3)
