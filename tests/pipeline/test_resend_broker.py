"""``pocketmq pipeline reconcile --resend-to``: the resend list goes to a real broker process
through pocketmq's own producer, with the stubs' message ids, exactly once per selection."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pyspark.sql import SparkSession

from pocketmq.client.sync import SyncAdmin
from pocketmq.pipeline.resend import BrokerSender, MessageSender, ProducerSender
from pocketmq.testing import BrokerProcess

from .helpers import log_row, reconcile_from_database, stub, tables
from .helpers import run_cli as run

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def topic_rows(spark: SparkSession, address: str, topic: str) -> dict[str, dict[str, Any]]:
    rows = (
        spark.read.format("pocketmq")
        .option("servers", address)
        .option("topic", topic)
        .load()
        .collect()
    )
    return {r["message_id"]: r.asDict() for r in rows}


def test_broker_sender_is_a_picklable_factory_of_message_senders() -> None:
    import pickle

    factory = pickle.loads(pickle.dumps(BrokerSender("127.0.0.1:1")))
    sender = factory()
    assert isinstance(sender, ProducerSender)
    assert isinstance(sender, MessageSender)


def test_reconcile_resends_to_a_real_broker(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = f"resend-{uuid.uuid4().hex[:8]}"
    with SyncAdmin(servers=broker.native) as admin:
        admin.create_topic(topic, queues=2)
    clock = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    due = clock - timedelta(minutes=5)
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = sa.create_engine(url)
    md, stub_t, log_t = tables(uuid.uuid4().hex[:8])
    md.create_all(engine)
    lost = [
        stub(
            f"lost-{i}",
            topic=topic,
            tag="paid",
            keys=f"order-{i} customer-7",
            content=f'{{"order": {i}}}'.encode(),
            queue_offset=i,
            send_count=1 + i % 2,
            next_resend_at=due,
        )
        for i in range(5)
    ]
    settled = stub("settled", topic=topic, status="CONFIRMED", queue_offset=9, next_resend_at=due)
    worn_out = stub("worn-out", topic=topic, queue_offset=6, send_count=5, next_resend_at=due)
    with engine.begin() as conn:
        conn.execute(stub_t.insert(), [*lost, settled, worn_out])
        conn.execute(log_t.insert(), [log_row("settled", 9, topic=topic)])
    args = reconcile_from_database(
        url, stub_t.name, log_t.name, tmp_path / "out", clock, "--resend-to", broker.native
    )
    code, out, err = run(*args)
    assert code == 0, err
    assert "resent: sent 5, skipped 0 (already claimed), failed 0, outcome unknown 0" in out

    stored = topic_rows(spark, broker.native, topic)
    assert sorted(stored) == [f"lost-{i}" for i in range(5)]  # not the settled or worn-out ones
    for row in lost:
        message = stored[row["message_id"]]
        assert message["body"] == row["content"]
        assert message["tag"] == "paid"
        assert message["keys"] == row["keys"]
    with engine.connect() as conn:
        after = {r.message_id: r for r in conn.execute(sa.select(stub_t))}
    for row in lost:
        updated = after[row["message_id"]]
        message = stored[row["message_id"]]
        assert updated.send_count == row["send_count"] + 1
        assert (updated.queue_id, updated.queue_offset) == (
            message["queue_id"],
            message["queue_offset"],
        )
        assert updated.broker_name == message["broker_name"]
        assert updated.next_resend_at >= clock + timedelta(seconds=60)
    assert after["worn-out"].send_count == 5

    # The same command again: the resent stubs are not due any more, nothing reaches the topic.
    code, out, err = run(*args)
    assert code == 0, err
    assert "resent: sent 0, skipped 0" in out
    assert sorted(topic_rows(spark, broker.native, topic)) == [f"lost-{i}" for i in range(5)]
    engine.dispose()


def test_an_unreachable_broker_is_recorded_per_stub_not_lost(
    spark: SparkSession, tmp_path: Path
) -> None:
    clock = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = sa.create_engine(url)
    md, stub_t, log_t = tables(uuid.uuid4().hex[:8])
    md.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            stub_t.insert(), [stub("lost", queue_offset=None, next_resend_at=clock - timedelta(1))]
        )
    nowhere = "127.0.0.1:1"  # nothing listens there
    code, out, err = run(
        *reconcile_from_database(
            url, stub_t.name, log_t.name, tmp_path / "out", clock, "--resend-to", nowhere
        )
    )
    assert code == 0, err
    assert "sent 0" in out
    assert "failed 1" in out or "outcome unknown 1" in out
    assert "send error: lost:" in err
    with engine.connect() as conn:
        row = conn.execute(sa.select(stub_t)).one()
    engine.dispose()
    # Claimed (count moved on, due again later) and the error kept for the next run to see.
    assert row.send_count == 2
    assert row.last_error
    assert row.status in {"UNCONFIRMED", "UNKNOWN"}
