"""Deterministic, realistic sample data for the pipelines (demos, tests, the benchmark).

Why generate instead of shipping files: the same code makes 1 000 rows for a README demo and
10 million for the benchmark, in seconds, with numpy and pyarrow only (no Spark). The same seed
gives the same bytes.

The stub table models an outbox over a few topics, each with 2 brokers x 8 queues, created over
the six hours before ``now``:

* most messages were delivered: the stub is CONFIRMED and the log has a CONSUMED row;
* some were received but not yet confirmed (log row RECEIVED, stub UNCONFIRMED);
* some were lost: stored (they have an offset) but never received although consumers moved past
  them — the resend list;
* some are merely behind: created in the last minutes, after the last logged offset;
* some never reached the broker: no offset, status UNKNOWN or UNCONFIRMED;
* some used up their sends (``send_count >= max_sends``) — the manual-handling list;
* a few were voided by the application; some are not due yet.

``log_ratio`` is the share of stubs with a log row. With ``exports=True`` it also writes a topic
export, a DLQ export and an attempt history in the broker export schemas, for the audit and the
DLQ report.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pocketmq.errors import InvalidArgumentError
from pocketmq.pipeline.schemas import (
    ATTEMPT_HISTORY_SCHEMA,
    DLQ_TOPIC_PREFIX,
    MESSAGE_LOG_SCHEMA,
    MESSAGE_STUB_SCHEMA,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    TOPIC_EXPORT_SCHEMA,
)

__all__ = ["DEMO_NOW", "DEMO_TOPICS", "DemoData", "generate_demo_data"]

#: The clock the demo data is built around (pass it as ``--now`` to reproduce the README).
DEMO_NOW: Final = datetime(2026, 11, 22, 12, 0, 0)
#: topic -> consuming group. ``payments`` is a FIFO topic (messages carry a message group).
DEMO_TOPICS: Final = {
    "orders": "billing",
    "payments": "ledger",
    "inventory": "warehouse",
    "shipping": "notifier",
}
_BROKERS: Final = ("broker-a", "broker-b")
_QUEUES: Final = 8
_SPAN_SECONDS: Final = 6 * 3600
_LAG_SECONDS: Final = 120  # consumers are this far behind the producers
_ERRORS: Final = (
    "TimeoutError: downstream payment gateway did not answer within 3000 ms",
    "IntegrityError: duplicate key value violates unique constraint ledger_entry_pkey",
    "ValueError: unknown currency code 'XBT'",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DemoData:
    """Where the generated data went and how much of it there is (and the clock and seed that
    reproduce it)."""

    out: Path
    stubs: int
    log: int
    stubs_path: Path
    log_path: Path
    topic_export_path: Path | None
    dlq_export_path: Path | None
    attempts_path: Path | None
    now: datetime
    seed: int


def _ids(prefix: str, idx: np.ndarray) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(idx), pa.string()), 22, "0")
    return pc.binary_join_element_wise(prefix, digits, "")


def _ts(values_us: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    return pa.array(values_us, type=pa.timestamp("us"), mask=mask)


def _queue_offsets(queue_key: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """Offsets 0, 1, 2... per queue in row order (rows are in creation order), -1 if not stored."""
    n = len(queue_key)
    key = np.where(stored, queue_key, -1)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_key)) + 1]
    run_lengths = np.diff(np.r_[starts, n])
    rank = np.arange(n) - np.repeat(starts, run_lengths)
    offsets = np.empty(n, dtype=np.int64)
    offsets[order] = rank
    return np.where(stored, offsets, -1)


def generate_demo_data(
    out: str | Path,
    *,
    stubs: int = 10_000,
    log_ratio: float = 0.9,
    seed: int = 7,
    now: datetime = DEMO_NOW,
    max_sends: int = 5,
    exports: bool = True,
    rows_per_file: int = 1_000_000,
    row_group_size: int = 256 * 1024,
) -> DemoData:
    """Write ``out/stubs``, ``out/log`` (and with ``exports``: ``topic-export``, ``dlq-export``,
    ``attempts``) as Parquet. Deterministic for a given seed and arguments."""
    if stubs < 0:
        raise InvalidArgumentError(f"stubs must be >= 0, got {stubs}")
    if not 0.0 <= log_ratio <= 1.0:
        raise InvalidArgumentError(f"log_ratio must be within [0, 1], got {log_ratio}")
    out = Path(out)
    rng = np.random.default_rng(seed)
    n = stubs
    now_us = int(now.replace(tzinfo=UTC).timestamp() * 1_000_000)
    topics = list(DEMO_TOPICS)

    idx = np.arange(n, dtype=np.int64)
    created = now_us - _SPAN_SECONDS * 1_000_000 + (idx * (_SPAN_SECONDS * 1_000_000)) // max(n, 1)
    topic_i = rng.integers(0, len(topics), n)
    broker_i = rng.integers(0, len(_BROKERS), n)
    queue_id = rng.integers(0, _QUEUES, n).astype(np.int32)

    # Fates. The last _LAG_SECONDS are not consumed yet; among the rest log_ratio are logged.
    lagging = created > now_us - _LAG_SECONDS * 1_000_000
    lag_share = float(lagging.mean()) if n else 0.0
    p_logged = min(1.0, log_ratio / (1.0 - lag_share)) if lag_share < 1.0 else 0.0
    logged = (~lagging) & (rng.random(n) < p_logged)
    not_logged = ~logged
    never_stored = not_logged & (rng.random(n) < 0.2)
    stored = ~never_stored

    confirmed = logged & (rng.random(n) < 0.97)
    status = np.where(confirmed, 0, 1)  # 0 CONFIRMED, 1 UNCONFIRMED, 2 VOID, 3 UNKNOWN
    roll = rng.random(n)
    status = np.where(never_stored & (roll < 0.5), 3, status)
    status = np.where(not_logged & (roll > 0.97), 2, status)
    status_names = np.array(["CONFIRMED", "UNCONFIRMED", "VOID", "UNKNOWN"], dtype=object)

    send_count = np.ones(n, dtype=np.int32)
    retries = rng.integers(1, max_sends + 2, n).astype(np.int32)
    send_count = np.where(not_logged, retries, send_count).astype(np.int32)
    backoff_s = 60 * np.power(2.0, np.minimum(send_count - 1, 10))
    jitter = rng.integers(0, 90_000_000, n)
    # Not-yet-due stubs: roughly one in eight of the unsettled ones.
    later = not_logged & (rng.random(n) < 0.12)
    next_resend = np.where(
        later,
        now_us + jitter,
        np.minimum(created + (backoff_s * 1_000_000).astype(np.int64), now_us - jitter),
    )
    next_resend = np.where(lagging & ~later, created + 600_000_000, next_resend)
    updated = np.maximum(created, np.minimum(next_resend, now_us) - 1_000_000)

    queue_key = (topic_i * len(_BROKERS) + broker_i) * _QUEUES + queue_id
    offsets = _queue_offsets(queue_key, stored)
    offset_mask = ~stored

    topic_arr = pa.array(np.array(topics, dtype=object)[topic_i], type=pa.string())
    broker_arr = pa.array(
        np.array(_BROKERS, dtype=object)[broker_i], type=pa.string(), mask=offset_mask
    )
    idx_str = pc.cast(pa.array(idx), pa.string())
    message_id = _ids(f"7F0000010{seed % 10:01d}", idx)
    content = pc.cast(
        pc.binary_join_element_wise(
            '{"order_id":',
            idx_str,
            ',"amount_cents":',
            pc.cast(pa.array(idx % 9973 * 7), pa.string()),
            "}",
            "",
        ),
        pa.binary(),
    )
    tags = np.array(["created", "paid", "reserved", "dispatched"], dtype=object)[topic_i]
    keys = pc.binary_join_element_wise(
        "order-", idx_str, " customer-", pc.cast(pa.array(idx % 5003), pa.string()), ""
    )
    last_error = np.full(n, None, dtype=object)
    last_error[not_logged & (send_count > 1)] = "send timed out after 3000 ms"

    stub_table = pa.table(
        {
            "message_id": message_id,
            "topic": topic_arr,
            "tag": pa.array(tags, type=pa.string()),
            "keys": keys,
            "content": content,
            "status": pa.array(status_names[status], type=pa.string()),
            "send_count": pa.array(send_count, type=pa.int32()),
            "broker_name": broker_arr,
            "queue_id": pa.array(queue_id, type=pa.int32(), mask=offset_mask),
            "queue_offset": pa.array(offsets, type=pa.int64(), mask=offset_mask),
            "next_resend_at": _ts(next_resend),
            "created_at": _ts(created),
            "updated_at": _ts(updated),
            "last_error": pa.array(last_error, type=pa.string()),
        },
        schema=MESSAGE_STUB_SCHEMA,
    )

    # The log: one row per logged stub, in the group that consumes its topic.
    li = np.flatnonzero(logged)
    groups = np.array([DEMO_TOPICS[t] for t in topics], dtype=object)
    receive_count = np.where(rng.random(len(li)) < 0.01, 2, 1).astype(np.int32)
    latency_us = (rng.exponential(2.0, len(li)) * 1_000_000).astype(np.int64)
    latency_us = np.where(rng.random(len(li)) < 0.005, latency_us + 600_000_000, latency_us)
    received = created[li] + 5_000 + latency_us
    consumed_mask = ~confirmed[li]
    consumed = received + rng.integers(1_000, 200_000, len(li))
    log_table = pa.table(
        {
            "consumer_group": pa.array(groups[topic_i[li]], type=pa.string()),
            "message_id": message_id.take(pa.array(li)),
            "topic": topic_arr.take(pa.array(li)),
            "broker_name": pa.array(
                np.array(_BROKERS, dtype=object)[broker_i[li]], type=pa.string()
            ),
            "queue_id": pa.array(queue_id[li], type=pa.int32()),
            "queue_offset": pa.array(offsets[li], type=pa.int64()),
            "status": pa.array(np.where(confirmed[li], "CONSUMED", "RECEIVED"), type=pa.string()),
            "receive_count": pa.array(receive_count, type=pa.int32()),
            "created_at": _ts(received),
            "consumed_at": _ts(consumed, mask=consumed_mask),
        },
        schema=MESSAGE_LOG_SCHEMA,
    )

    stubs_path = out / "stubs"
    log_path = out / "log"
    _write_files(stub_table, stubs_path, rows_per_file, row_group_size)
    _write_files(log_table, log_path, rows_per_file, row_group_size)

    topic_export_path = dlq_path = attempts_path = None
    if exports:
        topic_export_path, dlq_path, attempts_path = _write_exports(
            out, rng, stub_table, log_table, stored, now_us
        )
    (out / "demo.json").write_text(
        json.dumps(
            {
                "now": now.isoformat(),
                "seed": seed,
                "stubs": n,
                "log": log_table.num_rows,
                "max_sends": max_sends,
            },
            indent=2,
        )
        + "\n"
    )
    return DemoData(
        out=out,
        stubs=n,
        log=log_table.num_rows,
        stubs_path=stubs_path,
        log_path=log_path,
        topic_export_path=topic_export_path,
        dlq_export_path=dlq_path,
        attempts_path=attempts_path,
        now=now,
        seed=seed,
    )


def _write_files(table: pa.Table, path: Path, rows_per_file: int, row_group_size: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.parquet"):
        old.unlink()
    files = max(1, math.ceil(table.num_rows / max(rows_per_file, 1)))
    for i in range(files):
        chunk = table.slice(i * rows_per_file, rows_per_file)
        pq.write_table(
            chunk,
            path / f"part-{i:05d}.parquet",
            row_group_size=row_group_size,
            compression="snappy",
        )


def _ms(us: np.ndarray) -> pa.Array:
    return pa.array(us // 1000, type=pa.timestamp("ms", tz="UTC"))


def _write_exports(
    out: Path,
    rng: np.random.Generator,
    stubs: pa.Table,
    log: pa.Table,
    stored: np.ndarray,
    now_us: int,
) -> tuple[Path, Path, Path]:
    """Topic export of every stored message, a DLQ export and an attempt history."""
    si = np.flatnonzero(stored)
    sub = stubs.take(pa.array(si))
    created = sub.column("created_at").cast(pa.int64()).to_numpy()
    stored_us = created + rng.integers(200, 5_000, len(si))
    n = len(si)
    is_fifo = pc.equal(sub.column("topic"), "payments").to_numpy(zero_copy_only=False)
    group_no = rng.integers(0, 40, n)
    message_group = np.full(n, None, dtype=object)
    message_group[is_fifo] = np.char.add("account-", group_no[is_fifo].astype(str)).astype(object)
    dates = pc.strftime(_ms(stored_us), format="%Y-%m-%d")
    export = pa.table(
        {
            "message_id": sub.column("message_id"),
            "topic": sub.column("topic"),
            "queue_id": sub.column("queue_id"),
            "queue_offset": sub.column("queue_offset"),
            "body": sub.column("content"),
            "tag": sub.column("tag"),
            "keys": sub.column("keys"),
            "message_group": pa.array(message_group, type=pa.string()),
            "delivery_attempt": pa.array(np.ones(n, dtype=np.int32)),
            "born_timestamp": _ms(created),
            "store_timestamp": _ms(stored_us),
            "properties": pa.array([[] for _ in range(n)], type=pa.map_(pa.string(), pa.string())),
            "broker_name": sub.column("broker_name"),
            "date": dates,
        },
        schema=TOPIC_EXPORT_SCHEMA,
    )
    export_path = out / "topic-export"
    _write_partitioned(export, export_path)

    # Attempt history and DLQ: from the log's received-but-not-consumed rows (they keep failing)
    # plus the duplicated receipts (one failed attempt, then success).
    mg_by_id = (
        dict(zip(export.column("message_id").to_pylist(), message_group.tolist(), strict=True))
        if n <= 2_000_000
        else {}
    )
    stored_by_id = (
        dict(zip(export.column("message_id").to_pylist(), stored_us.tolist(), strict=True))
        if n <= 2_000_000
        else {}
    )
    rows: list[dict[str, Any]] = []
    dlq_rows: list[dict[str, Any]] = []
    consumers = ("host-1:4242", "host-2:4343")
    log_rows = log.to_pylist() if log.num_rows <= 2_000_000 else []
    for row in log_rows:
        mid = row["message_id"]
        received_us = int(row["created_at"].replace(tzinfo=UTC).timestamp() * 1_000_000)
        base = dict(
            message_id=mid,
            consumer_group=row["consumer_group"],
            topic=row["topic"],
            message_group=mg_by_id.get(mid),
        )
        if row["status"] == "CONSUMED" and row["receive_count"] == 1:
            if rng.random() < 0.05:  # keep the history small: a sample of clean deliveries
                rows.append(_attempt(base, 1, consumers[0], "SUCCESS", None, received_us, 20_000))
            continue
        if row["status"] == "CONSUMED":
            err = _ERRORS[int(rng.integers(0, len(_ERRORS)))]
            rows.append(_attempt(base, 1, consumers[0], "EXCEPTION", err, received_us, 50_000))
            rows.append(
                _attempt(base, 2, consumers[1], "SUCCESS", None, received_us + 10_000_000, 30_000)
            )
            continue
        # RECEIVED, never consumed: failing. Half of them reached the DLQ already.
        err = _ERRORS[int(rng.integers(0, len(_ERRORS)))]
        to_dlq = rng.random() < 0.5 and mg_by_id.get(mid) is None
        attempts = 16 if to_dlq else int(rng.integers(1, 6))
        t = received_us
        for a in range(1, attempts + 1):
            outcome = "EXCEPTION" if a % 3 else "TIMEOUT"
            rows.append(_attempt(base, a, consumers[a % 2], outcome, err, t, 40_000))
            t += min(10 * 2**a, 7200) * 1_000_000
            if t > now_us - 1_000_000:
                t = now_us - 1_000_000
        if to_dlq:
            rows.append(_attempt(base, attempts + 1, consumers[0], "DLQ", err, t, 1_000))
            dlq_rows.append(
                dict(
                    message_id=f"DLQ{mid[3:]}",
                    topic=f"{DLQ_TOPIC_PREFIX}{row['consumer_group']}",
                    queue_id=0,
                    queue_offset=len(dlq_rows),
                    body=b"",
                    tag=None,
                    keys=None,
                    message_group=None,
                    delivery_attempt=attempts,
                    born_timestamp=stored_by_id.get(mid, t) // 1000,
                    store_timestamp=t // 1000,
                    properties=[
                        (PROPERTY_RETRY_TOPIC, row["topic"]),
                        (PROPERTY_ORIGIN_MESSAGE_ID, mid),
                    ],
                    broker_name=row["broker_name"],
                    date=datetime.fromtimestamp(t / 1e6, UTC).strftime("%Y-%m-%d"),
                )
            )
    attempts_table = pa.Table.from_pylist(rows, schema=ATTEMPT_HISTORY_SCHEMA)
    attempts_path = out / "attempts"
    _write_files(attempts_table, attempts_path, 1_000_000, 256 * 1024)
    dlq_table = pa.Table.from_pylist(dlq_rows, schema=TOPIC_EXPORT_SCHEMA)
    dlq_path = out / "dlq-export"
    _write_partitioned(dlq_table, dlq_path)
    return export_path, dlq_path, attempts_path


def _attempt(
    base: dict[str, Any],
    attempt: int,
    consumer: str,
    outcome: str,
    error: str | None,
    delivered_us: int,
    took_us: int,
) -> dict[str, Any]:
    delivered = datetime.fromtimestamp(delivered_us / 1e6, UTC)
    return {
        **base,
        "attempt": attempt,
        "consumer": consumer,
        "outcome": outcome,
        "error": error,
        "delivered_at": delivered,
        "finished_at": delivered + timedelta(microseconds=took_us),
    }


def _write_partitioned(table: pa.Table, path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    if table.num_rows == 0:
        # Keep the schema discoverable even without rows.
        pq.write_table(table.drop_columns(["topic", "date"]), path / "empty.parquet")
        return
    pq.write_to_dataset(
        table,
        root_path=str(path),
        partition_cols=["topic", "date"],
        basename_template="part-{i}.parquet",
        existing_data_behavior="delete_matching",
    )
