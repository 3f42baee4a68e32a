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
_STATUS_NAMES: Final = np.array(["CONFIRMED", "UNCONFIRMED", "VOID", "UNKNOWN"], dtype=object)
_CONSUMERS: Final = ("host-1:4242", "host-2:4343")
#: A failing message outside a message group that reached the DLQ did so after this many attempts.
_DLQ_AFTER_ATTEMPTS: Final = 16
#: The attempt history is built row by row in Python: above this many rows it is left empty.
_MAX_HISTORY_ROWS: Final = 2_000_000


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
    # One generator for everything, drawn from in a fixed order: the same seed gives the same bytes.
    rng = np.random.default_rng(seed)
    now_us = int(now.replace(tzinfo=UTC).timestamp() * 1_000_000)
    drawn = _draw_stubs(rng, stubs, now_us, log_ratio=log_ratio, max_sends=max_sends)
    stub_table = _stub_table(drawn, seed)
    log_table = _log_table(rng, drawn, stub_table)

    stubs_path = out / "stubs"
    log_path = out / "log"
    _write_files(stub_table, stubs_path, rows_per_file, row_group_size)
    _write_files(log_table, log_path, rows_per_file, row_group_size)

    topic_export_path = dlq_path = attempts_path = None
    if exports:
        topic_export_path, dlq_path, attempts_path = _write_exports(
            out, rng, stub_table, log_table, drawn.fates.stored, now_us
        )
    _write_manifest(
        out, now=now, seed=seed, stubs=stubs, log=log_table.num_rows, max_sends=max_sends
    )
    return DemoData(
        out=out,
        stubs=stubs,
        log=log_table.num_rows,
        stubs_path=stubs_path,
        log_path=log_path,
        topic_export_path=topic_export_path,
        dlq_export_path=dlq_path,
        attempts_path=attempts_path,
        now=now,
        seed=seed,
    )


@dataclass(frozen=True, slots=True)
class _Fates:
    """What happened to each stub (boolean arrays, one entry per stub), and its status code:
    0 CONFIRMED, 1 UNCONFIRMED, 2 VOID, 3 UNKNOWN (an index into ``_STATUS_NAMES``)."""

    lagging: np.ndarray
    logged: np.ndarray
    stored: np.ndarray
    confirmed: np.ndarray
    status: np.ndarray


@dataclass(frozen=True, slots=True)
class _Schedule:
    """Each stub's sends so far and when the outbox looks at it next (microseconds)."""

    send_count: np.ndarray
    next_resend_us: np.ndarray
    updated_us: np.ndarray


@dataclass(frozen=True, slots=True)
class _DrawnStubs:
    """The random draws behind the stub table, one entry per stub in creation order; the log
    is drawn from the same arrays."""

    created_us: np.ndarray
    topic_i: np.ndarray
    broker_i: np.ndarray
    queue_id: np.ndarray
    offsets: np.ndarray
    fates: _Fates
    schedule: _Schedule


def _draw_stubs(
    rng: np.random.Generator, n: int, now_us: int, *, log_ratio: float, max_sends: int
) -> _DrawnStubs:
    """Creation times spread evenly over the span, then each stub's queue, fate and schedule."""
    idx = np.arange(n, dtype=np.int64)
    created = now_us - _SPAN_SECONDS * 1_000_000 + (idx * (_SPAN_SECONDS * 1_000_000)) // max(n, 1)
    topic_i = rng.integers(0, len(DEMO_TOPICS), n)
    broker_i = rng.integers(0, len(_BROKERS), n)
    queue_id = rng.integers(0, _QUEUES, n).astype(np.int32)
    fates = _draw_fates(rng, created, now_us, log_ratio)
    schedule = _draw_schedule(rng, created, fates, now_us, max_sends)
    queue_key = (topic_i * len(_BROKERS) + broker_i) * _QUEUES + queue_id
    return _DrawnStubs(
        created_us=created,
        topic_i=topic_i,
        broker_i=broker_i,
        queue_id=queue_id,
        offsets=_queue_offsets(queue_key, fates.stored),
        fates=fates,
        schedule=schedule,
    )


def _draw_fates(
    rng: np.random.Generator, created: np.ndarray, now_us: int, log_ratio: float
) -> _Fates:
    """The last ``_LAG_SECONDS`` are not consumed yet; among the rest ``log_ratio`` are logged.

    The probability of a log row is raised to make up for the lagging stubs, so that
    ``log_ratio`` holds for the table as a whole."""
    n = len(created)
    lagging = created > now_us - _LAG_SECONDS * 1_000_000
    lag_share = float(lagging.mean()) if n else 0.0
    p_logged = min(1.0, log_ratio / (1.0 - lag_share)) if lag_share < 1.0 else 0.0
    logged = (~lagging) & (rng.random(n) < p_logged)
    not_logged = ~logged
    never_stored = not_logged & (rng.random(n) < 0.2)

    confirmed = logged & (rng.random(n) < 0.97)
    status = np.where(confirmed, 0, 1)
    roll = rng.random(n)
    status = np.where(never_stored & (roll < 0.5), 3, status)
    status = np.where(not_logged & (roll > 0.97), 2, status)
    return _Fates(
        lagging=lagging, logged=logged, stored=~never_stored, confirmed=confirmed, status=status
    )


def _draw_schedule(
    rng: np.random.Generator, created: np.ndarray, fates: _Fates, now_us: int, max_sends: int
) -> _Schedule:
    """Unsettled stubs were sent up to ``max_sends + 1`` times with exponential back-off;
    lagging ones are checked ten minutes after creation."""
    n = len(created)
    not_logged = ~fates.logged
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
    next_resend = np.where(fates.lagging & ~later, created + 600_000_000, next_resend)
    updated = np.maximum(created, np.minimum(next_resend, now_us) - 1_000_000)
    return _Schedule(send_count=send_count, next_resend_us=next_resend, updated_us=updated)


def _order_payloads(idx: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """A small JSON body and the message keys for each order number."""
    idx_str = pc.cast(pa.array(idx), pa.string())
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
    keys = pc.binary_join_element_wise(
        "order-", idx_str, " customer-", pc.cast(pa.array(idx % 5003), pa.string()), ""
    )
    return content, keys


def _stub_table(drawn: _DrawnStubs, seed: int) -> pa.Table:
    """The outbox table (:data:`MESSAGE_STUB_SCHEMA`); a stub that never reached the broker has
    no broker, queue or offset."""
    n = len(drawn.created_us)
    idx = np.arange(n, dtype=np.int64)
    offset_mask = ~drawn.fates.stored
    content, keys = _order_payloads(idx)
    tags = np.array(["created", "paid", "reserved", "dispatched"], dtype=object)[drawn.topic_i]
    send_count = drawn.schedule.send_count
    last_error = np.full(n, None, dtype=object)
    last_error[~drawn.fates.logged & (send_count > 1)] = "send timed out after 3000 ms"
    return pa.table(
        {
            "message_id": _ids(f"7F0000010{seed % 10:01d}", idx),
            "topic": pa.array(
                np.array(list(DEMO_TOPICS), dtype=object)[drawn.topic_i], type=pa.string()
            ),
            "tag": pa.array(tags, type=pa.string()),
            "keys": keys,
            "content": content,
            "status": pa.array(_STATUS_NAMES[drawn.fates.status], type=pa.string()),
            "send_count": pa.array(send_count, type=pa.int32()),
            "broker_name": pa.array(
                np.array(_BROKERS, dtype=object)[drawn.broker_i], type=pa.string(), mask=offset_mask
            ),
            "queue_id": pa.array(drawn.queue_id, type=pa.int32(), mask=offset_mask),
            "queue_offset": pa.array(drawn.offsets, type=pa.int64(), mask=offset_mask),
            "next_resend_at": _ts(drawn.schedule.next_resend_us),
            "created_at": _ts(drawn.created_us),
            "updated_at": _ts(drawn.schedule.updated_us),
            "last_error": pa.array(last_error, type=pa.string()),
        },
        schema=MESSAGE_STUB_SCHEMA,
    )


def _log_table(rng: np.random.Generator, drawn: _DrawnStubs, stub_table: pa.Table) -> pa.Table:
    """The consumers' log (:data:`MESSAGE_LOG_SCHEMA`): one row per logged stub, in the group
    that consumes its topic. About 1 % were received twice, 0.5 % took ten minutes more."""
    li = np.flatnonzero(drawn.fates.logged)
    rows = pa.array(li)
    groups = np.array(list(DEMO_TOPICS.values()), dtype=object)
    receive_count = np.where(rng.random(len(li)) < 0.01, 2, 1).astype(np.int32)
    latency_us = (rng.exponential(2.0, len(li)) * 1_000_000).astype(np.int64)
    latency_us = np.where(rng.random(len(li)) < 0.005, latency_us + 600_000_000, latency_us)
    received = drawn.created_us[li] + 5_000 + latency_us
    confirmed = drawn.fates.confirmed[li]
    consumed = received + rng.integers(1_000, 200_000, len(li))
    return pa.table(
        {
            "consumer_group": pa.array(groups[drawn.topic_i[li]], type=pa.string()),
            "message_id": stub_table.column("message_id").take(rows),
            "topic": stub_table.column("topic").take(rows),
            "broker_name": pa.array(
                np.array(_BROKERS, dtype=object)[drawn.broker_i[li]], type=pa.string()
            ),
            "queue_id": pa.array(drawn.queue_id[li], type=pa.int32()),
            "queue_offset": pa.array(drawn.offsets[li], type=pa.int64()),
            "status": pa.array(np.where(confirmed, "CONSUMED", "RECEIVED"), type=pa.string()),
            "receive_count": pa.array(receive_count, type=pa.int32()),
            "created_at": _ts(received),
            "consumed_at": _ts(consumed, mask=~confirmed),
        },
        schema=MESSAGE_LOG_SCHEMA,
    )


def _write_manifest(
    out: Path, *, now: datetime, seed: int, stubs: int, log: int, max_sends: int
) -> None:
    """``demo.json``: the arguments that reproduce the data (the benchmark's cache marker)."""
    manifest = {
        "now": now.isoformat(),
        "seed": seed,
        "stubs": stubs,
        "log": log,
        "max_sends": max_sends,
    }
    (out / "demo.json").write_text(json.dumps(manifest, indent=2) + "\n")


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
    export, stored_us = _topic_export_table(rng, stubs, stored)
    export_path = out / "topic-export"
    _write_partitioned(export, export_path)

    attempts, dead_letters = _delivery_history(rng, log, export, stored_us, now_us)
    attempts_table = pa.Table.from_pylist(attempts, schema=ATTEMPT_HISTORY_SCHEMA)
    attempts_path = out / "attempts"
    _write_files(attempts_table, attempts_path, 1_000_000, 256 * 1024)
    dlq_table = pa.Table.from_pylist(dead_letters, schema=TOPIC_EXPORT_SCHEMA)
    dlq_path = out / "dlq-export"
    _write_partitioned(dlq_table, dlq_path)
    return export_path, dlq_path, attempts_path


def _topic_export_table(
    rng: np.random.Generator, stubs: pa.Table, stored: np.ndarray
) -> tuple[pa.Table, np.ndarray]:
    """The broker's export (:data:`TOPIC_EXPORT_SCHEMA`) of the stored stubs, and their store
    times in microseconds. ``payments`` messages belong to one of 40 message groups (FIFO)."""
    si = np.flatnonzero(stored)
    sub = stubs.take(pa.array(si))
    created = sub.column("created_at").cast(pa.int64()).to_numpy()
    stored_us = created + rng.integers(200, 5_000, len(si))
    n = len(si)
    is_fifo = pc.equal(sub.column("topic"), "payments").to_numpy(zero_copy_only=False)
    group_no = rng.integers(0, 40, n)
    message_group = np.full(n, None, dtype=object)
    message_group[is_fifo] = np.char.add("account-", group_no[is_fifo].astype(str)).astype(object)
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
            "date": pc.strftime(_ms(stored_us), format="%Y-%m-%d"),
        },
        schema=TOPIC_EXPORT_SCHEMA,
    )
    return export, stored_us


def _delivery_history(
    rng: np.random.Generator, log: pa.Table, export: pa.Table, stored_us: np.ndarray, now_us: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Attempt-history rows and DLQ export rows, one log row at a time.

    From the log's received-but-not-consumed rows (they keep failing) plus the duplicated
    receipts (one failed attempt, then success), and a sample of clean deliveries. Built in
    Python, so above ``_MAX_HISTORY_ROWS`` rows the history is left empty.
    """
    group_by_id: dict[str, str | None] = {}
    stored_by_id: dict[str, int] = {}
    if export.num_rows <= _MAX_HISTORY_ROWS:
        ids = export.column("message_id").to_pylist()
        group_by_id = dict(zip(ids, export.column("message_group").to_pylist(), strict=True))
        stored_by_id = dict(zip(ids, stored_us.tolist(), strict=True))
    attempts: list[dict[str, Any]] = []
    dead_letters: list[dict[str, Any]] = []
    log_rows = log.to_pylist() if log.num_rows <= _MAX_HISTORY_ROWS else []
    for row in log_rows:
        mid = row["message_id"]
        received_us = int(row["created_at"].replace(tzinfo=UTC).timestamp() * 1_000_000)
        base = dict(
            message_id=mid,
            consumer_group=row["consumer_group"],
            topic=row["topic"],
            message_group=group_by_id.get(mid),
        )
        if row["status"] == "CONSUMED":
            attempts.extend(_consumed_attempts(rng, base, row["receive_count"], received_us))
            continue
        failed, moved_us = _failing_attempts(rng, base, received_us, now_us)
        attempts.extend(failed)
        if moved_us is not None:
            born_us = stored_by_id.get(mid, moved_us)
            dead_letters.append(_dead_letter(row, len(dead_letters), born_us, moved_us))
    return attempts, dead_letters


def _consumed_attempts(
    rng: np.random.Generator, base: dict[str, Any], receive_count: int, received_us: int
) -> list[dict[str, Any]]:
    """A duplicated receipt is one failed attempt, then a success on the other consumer; of the
    clean deliveries only a 5 % sample is kept, so that the history stays small."""
    if receive_count == 1:
        if rng.random() < 0.05:
            return [_attempt(base, 1, _CONSUMERS[0], "SUCCESS", None, received_us, 20_000)]
        return []
    err = _ERRORS[int(rng.integers(0, len(_ERRORS)))]
    return [
        _attempt(base, 1, _CONSUMERS[0], "EXCEPTION", err, received_us, 50_000),
        _attempt(base, 2, _CONSUMERS[1], "SUCCESS", None, received_us + 10_000_000, 30_000),
    ]


def _failing_attempts(
    rng: np.random.Generator, base: dict[str, Any], received_us: int, now_us: int
) -> tuple[list[dict[str, Any]], int | None]:
    """A message received, never consumed: failing with back-off. Half of those outside a
    message group reached the DLQ already; returns the attempts and when it moved there."""
    err = _ERRORS[int(rng.integers(0, len(_ERRORS)))]
    to_dlq = rng.random() < 0.5 and base["message_group"] is None
    attempts = _DLQ_AFTER_ATTEMPTS if to_dlq else int(rng.integers(1, 6))
    rows: list[dict[str, Any]] = []
    t = received_us
    for a in range(1, attempts + 1):
        outcome = "EXCEPTION" if a % 3 else "TIMEOUT"
        rows.append(_attempt(base, a, _CONSUMERS[a % 2], outcome, err, t, 40_000))
        t += min(10 * 2**a, 7200) * 1_000_000
        if t > now_us - 1_000_000:
            t = now_us - 1_000_000
    if not to_dlq:
        return rows, None
    rows.append(_attempt(base, attempts + 1, _CONSUMERS[0], "DLQ", err, t, 1_000))
    return rows, t


def _dead_letter(
    row: dict[str, Any], queue_offset: int, born_us: int, moved_us: int
) -> dict[str, Any]:
    """The DLQ topic's copy of the message of log ``row``, as the broker exports it."""
    mid = row["message_id"]
    return dict(
        message_id=f"DLQ{mid[3:]}",
        topic=f"{DLQ_TOPIC_PREFIX}{row['consumer_group']}",
        queue_id=0,
        queue_offset=queue_offset,
        body=b"",
        tag=None,
        keys=None,
        message_group=None,
        delivery_attempt=_DLQ_AFTER_ATTEMPTS,
        born_timestamp=born_us // 1000,
        store_timestamp=moved_us // 1000,
        properties=[(PROPERTY_RETRY_TOPIC, row["topic"]), (PROPERTY_ORIGIN_MESSAGE_ID, mid)],
        broker_name=row["broker_name"],
        date=datetime.fromtimestamp(moved_us / 1e6, UTC).strftime("%Y-%m-%d"),
    )


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
