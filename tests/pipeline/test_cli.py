"""``pocketmq pipeline ...`` through click's CliRunner (in-process: it reuses the test session)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from pocketmq.pipeline.demo import DEMO_NOW

from .helpers import read_rows, reconcile_from_database, reference_lists
from .helpers import run_cli as run


def test_pipeline_help_lists_the_jobs() -> None:
    code, out, _ = run("pipeline", "--help")
    assert code == 0
    for command in ("reconcile", "demo-data", "audit", "dlq-report"):
        assert command in out


def test_demo_data_is_deterministic(tmp_path: Path) -> None:
    for name in ("a", "b"):
        code, out, _ = run(
            "pipeline", "demo-data", "--out", str(tmp_path / name), "--stubs", "500", "--seed", "3"
        )
        assert code == 0, out
        assert "pocketmq pipeline reconcile" in out
    for part in ("stubs", "log", "attempts"):
        assert pq.read_table(tmp_path / "a" / part).equals(pq.read_table(tmp_path / "b" / part))
    run(
        "pipeline",
        "demo-data",
        "--out",
        str(tmp_path / "c"),
        "--stubs",
        "500",
        "--seed",
        "4",
        "--no-exports",
    )
    assert not pq.read_table(tmp_path / "a" / "stubs").equals(
        pq.read_table(tmp_path / "c" / "stubs")
    )
    assert not (tmp_path / "c" / "topic-export").exists()


@pytest.mark.spark
def test_reconcile_command_on_demo_data(spark: SparkSession, tmp_path: Path) -> None:
    run("pipeline", "demo-data", "--out", str(tmp_path), "--stubs", "1500", "--no-exports")
    code, out, err = run(
        "pipeline",
        "reconcile",
        "--stubs",
        str(tmp_path / "stubs"),
        "--log",
        str(tmp_path / "log"),
        "--out",
        str(tmp_path / "result"),
        "--max-sends",
        "4",
        "--now",
        "2026-11-22T13:00:00+01:00",
        "--master",
        "local[2]",
    )
    assert code == 0, err
    resend, manual = reference_lists(
        read_rows(tmp_path / "stubs"), read_rows(tmp_path / "log"), DEMO_NOW, 4
    )
    assert {r["message_id"] for r in read_rows(tmp_path / "result" / "resend")} == resend
    assert {r["message_id"] for r in read_rows(tmp_path / "result" / "manual")} == manual
    total = next(line for line in out.splitlines() if "total" in line)
    assert str(len(resend)) in total
    assert str(len(manual)) in total


def test_reconcile_missing_input_fails_on_stderr(tmp_path: Path) -> None:
    code, out, err = run(
        "pipeline",
        "reconcile",
        "--stubs",
        str(tmp_path / "nope"),
        "--log",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 1
    assert "input not found" in err
    assert out == ""


def test_reconcile_rejects_a_bad_clock(tmp_path: Path) -> None:
    code, _, err = run(
        "pipeline", "reconcile", "--stubs", "a", "--log", "b", "--out", "c", "--now", "yesterday"
    )
    assert code == 2
    assert "ISO 8601" in err


def test_reconcile_rejects_an_unknown_database(tmp_path: Path) -> None:
    code, _, err = run(
        "pipeline",
        "reconcile",
        "--stubs",
        "oracle://h/db",
        "--log",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 1
    assert "oracle" in err


@pytest.mark.spark
def test_audit_and_dlq_report_commands(spark: SparkSession, tmp_path: Path) -> None:
    run("pipeline", "demo-data", "--out", str(tmp_path), "--stubs", "1200", "--seed", "9")
    code, out, err = run(
        "pipeline",
        "audit",
        "--export",
        str(tmp_path / "topic-export"),
        "--log",
        str(tmp_path / "log"),
        "--out",
        str(tmp_path / "audit"),
        "--late-after",
        "30s",
        "--grace",
        "5m",
        "--now",
        DEMO_NOW.isoformat(),
        "--subscription",
        "orders=auditor",
    )
    assert code == 0, err
    assert "delivery audit" in out
    assert "auditor" in out  # a subscribed group with no log rows: everything lost
    for part in ("summary", "lost", "duplicated", "late"):
        assert (tmp_path / "audit" / part).is_dir()

    code, out, err = run(
        "pipeline",
        "dlq-report",
        "--dlq",
        str(tmp_path / "dlq-export"),
        "--attempts",
        str(tmp_path / "attempts"),
        "--out",
        str(tmp_path / "dlq"),
        "--stuck-after",
        "10m",
        "--top-errors",
        "3",
        "--now",
        DEMO_NOW.isoformat(),
    )
    assert code == 0, err
    assert "DLQ and retry report" in out
    for part in ("ageing", "errors", "stuck", "summary"):
        assert (tmp_path / "dlq" / part).is_dir()


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("90", True),
        ("1.5m", True),
        ("2h", True),
        ("500ms", True),
        ("soon", False),
        ("-5s", False),
        ("nan", False),
        ("inf", False),
    ],
)
def test_durations(tmp_path: Path, text: str, ok: bool) -> None:
    code, _, err = run(
        "pipeline",
        "dlq-report",
        "--dlq",
        str(tmp_path / "missing"),
        "--attempts",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--stuck-after",
        text,
    )
    if ok:
        assert code == 1  # parsed; then the missing input is reported
        assert "input not found" in err
    else:
        assert code == 2
        assert "duration" in err or "negative" in err


def test_subscription_must_be_topic_equals_group(tmp_path: Path) -> None:
    code, _, err = run(
        "pipeline",
        "audit",
        "--export",
        str(tmp_path),
        "--log",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--subscription",
        "orders",
    )
    assert code == 2
    assert "TOPIC=GROUP" in err


@pytest.mark.spark
def test_reconcile_can_send_the_resend_list(spark: SparkSession, tmp_path: Path) -> None:
    import uuid

    import sqlalchemy as sa
    from pyspark import cloudpickle

    from . import senders
    from .helpers import log_row, stub, tables

    cloudpickle.register_pickle_by_value(senders)
    # --now chooses what is due; the stub updates use the real clock.
    clock = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    now = clock - timedelta(seconds=30)
    due = clock - timedelta(minutes=1)
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = sa.create_engine(url)
    md, stub_t, log_t = tables(uuid.uuid4().hex[:8])
    md.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            stub_t.insert(),
            [
                stub("lost", queue_offset=1, next_resend_at=due),
                stub("held", queue_offset=5, next_resend_at=due),
            ],
        )
        conn.execute(log_t.insert(), [log_row("other", 3)])
    engine.dispose()
    senders.RECORD_PATH = str(tmp_path / "sent.jsonl")
    args = reconcile_from_database(
        url,
        stub_t.name,
        log_t.name,
        tmp_path / "out",
        now,
        "--send-with",
        f"{senders.__name__}:make_sender",
    )
    code, out, err = run(*args)
    assert code == 0, err
    assert "resent: sent 1, skipped 0" in out
    assert senders.recorded(senders.RECORD_PATH) == ["lost"]
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        lost = conn.execute(sa.select(stub_t).where(stub_t.c.message_id == "lost")).one()
    engine.dispose()
    assert lost.send_count == 2
    assert lost.updated_at >= clock
    assert lost.next_resend_at >= clock + timedelta(seconds=60)  # the real clock + the delay
    # Same clock again: the stub is no longer due, so nothing is selected or sent.
    code, out, err = run(*args)
    assert code == 0, err
    assert "resent: sent 0, skipped 0" in out
    assert senders.recorded(senders.RECORD_PATH) == ["lost"]


@pytest.mark.parametrize(
    ("sender", "message"),
    [
        (["--send-with", "os:getcwd"], "database URL"),
        (["--resend-to", "127.0.0.1:10911"], "database URL"),
        (["--resend-to", "127.0.0.1:10911", "--send-with", "os:getcwd"], "exclusive"),
    ],
)
def test_sender_options_are_checked_before_spark_starts(
    tmp_path: Path, sender: list[str], message: str
) -> None:
    code, _, err = run(
        "pipeline",
        "reconcile",
        "--stubs",
        str(tmp_path),
        "--log",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        *sender,
    )
    assert code == 2
    assert message in err


def test_send_with_refuses_a_jdbc_stub_url(tmp_path: Path) -> None:
    code, _, err = run(
        "pipeline",
        "reconcile",
        "--stubs",
        "jdbc:postgresql://127.0.0.1:5432/test",
        "--log",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--send-with",
        "os:getcwd",
    )
    assert code == 2
    assert "SQLAlchemy" in err


@pytest.mark.parametrize("delay", ["0", "2h"])
def test_resend_delay_must_fit_the_toolkits_policy(tmp_path: Path, delay: str) -> None:
    """--resend-delay is the base interval of the toolkit's ResendPolicy (at most its 1 h cap)."""
    code, _, err = run(
        "pipeline",
        "reconcile",
        "--stubs",
        f"sqlite:///{tmp_path / 'outbox.db'}",
        "--log",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--send-with",
        "os:getcwd",
        "--resend-delay",
        delay,
    )
    assert code == 2
    assert "--resend-delay" in err
    assert "at most 3600 s" in err
