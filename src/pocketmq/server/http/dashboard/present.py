"""How the dashboard shows what the broker reports: times, ages and message bodies as text for
the pages, and the rows of its JSON API under ``/api/`` (docs/operations.md, "Dashboard")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pocketmq.broker.overview import DeadLetterRow, GroupOverview
from pocketmq.errors import InvalidArgumentError
from pocketmq.server.http.dashboard import actions

__all__ = [
    "age",
    "copy_json",
    "counted",
    "group_json",
    "letter_json",
    "line_json",
    "parse_time",
    "preview",
    "when",
]


def when(ms: int) -> str:
    """An epoch-ms time as UTC text ("-" when unknown)."""
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def age(ms: int) -> str:
    """A duration in ms in the largest unit that fits (ms, s, min, h, d)."""
    seconds = ms / 1000
    if seconds < 1:
        return "0 s" if ms == 0 else f"{ms} ms"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def counted(count: int, noun: str) -> str:
    """``"1 segment"``, ``"2 segments"``, ``"1,024 bytes"``: a count with its noun agreeing."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def preview(body: bytes) -> tuple[str, str]:
    """(kind, text): JSON pretty-printed, UTF-8 text, or hex for anything else."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", body[:4096].hex(" ")
    try:
        return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)[:16384]
    except ValueError:
        return "text", text[:16384]


def parse_time(text: str) -> int:
    """An ISO-8601 time from a form as epoch ms (no zone: UTC; empty: 0)."""
    if not text:
        return 0
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(f"{text!r} is not an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def group_json(o: GroupOverview, *, detail: bool = False) -> dict[str, Any]:
    """A group's overview for the API (``detail``: its consumers, queues and retry policy)."""
    out: dict[str, Any] = {
        "name": o.name,
        "fifo": o.config.fifo,
        "lag": o.lag,
        "lag_latency_ms": o.lag_latency_ms,
        "inflight": o.inflight,
        "retry_backlog": o.retry_backlog,
        "dlq_depth": o.dlq_depth,
        "dlq_last_hour": o.dlq_last_hour,
        "blocked_fifo_groups": o.blocked_fifo_groups,
        "redeliveries": o.redeliveries,
        "consumers": len(o.consumers),
    }
    if detail:
        out["consumers"] = [
            {
                "client_id": r.client_id,
                "protocol": r.client.protocol,
                "language": r.client.language,
                "version": r.client.version,
                "address": r.client.address,
                "last_heartbeat": r.last_seen,
            }
            for r in o.consumers
        ]
        out["queues"] = [
            {
                "topic": q.topic,
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "committed": q.committed,
                "lag": q.lag,
                "inflight": q.inflight,
            }
            for q in o.queues
        ]
        retry = o.config.retry
        out["retry_policy"] = {"max_retries": retry.max_retries, "delays": list(retry.delays)}
    return out


def letter_json(r: DeadLetterRow) -> dict[str, Any]:
    """A dead letter's row for the API."""
    return {
        "dlq_offset": r.dlq_offset,
        "message_id": r.message_id,
        "origin_topic": r.origin_topic,
        "tag": r.tag,
        "keys": r.keys,
        "reason": r.reason,
        "last_error": r.last_error,
        "attempts": r.attempts,
        "stored_at_ms": r.stored_at_ms,
        "redriven": r.redriven,
    }


def line_json(line: actions.RedriveLine) -> dict[str, Any]:
    """One line of a redrive's report for the API."""
    return {
        "dlq_offset": line.dlq_offset,
        "message_id": line.message_id,
        "status": line.status,
        "topic": line.target_topic,
        "queue_id": line.queue_id,
        "queue_offset": line.queue_offset,
    }


def copy_json(m: Any) -> dict[str, Any]:
    """A stored copy of a message (topic, place, properties, previewed body) for the API."""
    kind, text = preview(m.body)
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "stored_at_ms": m.store_timestamp,
        "properties": m.properties,
        "body": text,
        "body_kind": kind,
    }
