"""``pocketmq export``: topics, dead-letter queues and the attempt history as Parquet.

The audit and DLQ jobs (and anything else: DuckDB, pandas, Spark) read these files; no Spark is
needed to write them, only pyarrow. Layout under ``OUT``::

    topics/topic=<topic>/date=<YYYY-MM-DD>/part-<queue>-<first>-<end>-<broker>.parquet
    dlq/topic=%25DLQ%25<group>/date=<YYYY-MM-DD>/part-0-<first>-<end>-<broker>.parquet
    history/date=<YYYY-MM-DD>/part-0-<first>-<end>-<broker>.parquet

Topic and DLQ files have :data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA` (``topic`` and
``date`` are the directory names, as Hive partitioning has it; ``%`` in a topic is written
``%25`` and Spark decodes it), ``date`` being the UTC date the broker stored the message. History
files have :data:`~pocketmq.pipeline.schemas.ATTEMPT_HISTORY_SCHEMA`, partitioned by the UTC date
of ``delivered_at`` (the history is one ledger per broker, not one per topic; its ``topic``
column is the message's topic; a record's attempts, recorded together, go to its first one's
date).

**Why file names carry offsets.** Each file holds one contiguous run of queue offsets
``[first, end)`` of one queue on one broker, all of one date. A re-run first lists the files
already there, and reads only the offsets no file covers yet: running the export twice writes
nothing new, running it every hour appends the last hour, and nothing is ever rewritten. Files
are written under a hidden temporary name and renamed, so an interrupted run leaves no partial
file a reader would see (only ``.part-*.tmp`` files, which readers skip and the next run
replaces). Offsets restart at 0 only when a topic is deleted and created again: export such a
topic into a fresh directory.

``since`` skips messages stored (history: attempts delivered) before that instant; a later run
without it fills in what was skipped.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from pocketmq.client import DeliveryAttempt, StoredMessage
from pocketmq.client.config import ClientConfig
from pocketmq.client.sync import SyncAdmin
from pocketmq.errors import InvalidArgumentError
from pocketmq.pipeline.browse import (
    DEFAULT_PAGE_SIZE,
    QueueSpan,
    attempts_table,
    browse_range,
    messages_table,
    queue_spans,
    utc_date,
)
from pocketmq.pipeline.schemas import (
    ATTEMPT_HISTORY_SCHEMA,
    DLQ_TOPIC_PREFIX,
    HISTORY_TOPIC,
    TOPIC_EXPORT_PARTITIONING,
    TOPIC_EXPORT_SCHEMA,
)

__all__ = [
    "DLQ_DIR",
    "HISTORY_DIR",
    "TOPICS_DIR",
    "ExportSummary",
    "ExportedSource",
    "export_to_parquet",
    "exported_ranges",
]

TOPICS_DIR: Final = "topics"
DLQ_DIR: Final = "dlq"
HISTORY_DIR: Final = "history"
#: At most this many rows per file (a longer run of offsets is split into several files).
DEFAULT_ROWS_PER_FILE: Final = 200_000

_FILE = re.compile(r"^part-(\d+)-(\d+)-(\d+)-(.+)\.parquet$")
_EMPTY: Final = "empty.parquet"


@dataclass(frozen=True, slots=True)
class ExportedSource:
    """What one run did for one topic, DLQ or the history; ``already`` shows that a re-run only
    adds what is new."""

    kind: str  # "topic" | "dlq" | "history"
    topic: str
    queues: int
    rows: int  # written by this run
    files: int  # written by this run
    already: int  # offsets exported by earlier runs (their files were kept)
    skipped: int  # messages older than ``since``
    path: str


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What one ``pocketmq export`` run did: a line per source for the command's table, and the
    totals.
    """

    sources: tuple[ExportedSource, ...]
    out: str
    seconds: float

    @property
    def rows(self) -> int:
        """Rows written by this run over every source (the command's headline figure)."""
        return sum(s.rows for s in self.sources)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _file_name(queue_id: int, first: int, end: int, broker: str) -> str:
    return f"part-{queue_id}-{first}-{end}-{_quote(broker)}.parquet"


def exported_ranges(directory: Path) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """The offset ranges already exported under ``directory``: ``(broker, queue) -> [(first,
    end), ...]`` sorted, read from the file names of every ``date=*`` partition."""
    found: dict[tuple[str, int], list[tuple[int, int]]] = {}
    if not directory.is_dir():
        return found
    for part in directory.glob("date=*/part-*.parquet"):
        match = _FILE.match(part.name)
        if match is None:
            continue
        queue, first, end, broker = match.groups()
        key = (urllib.parse.unquote(broker), int(queue))
        found.setdefault(key, []).append((int(first), int(end)))
    for ranges in found.values():
        ranges.sort()
    return found


def _uncovered(lo: int, hi: int, covered: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of ``[lo, hi)`` outside every range of ``covered`` (sorted)."""
    at = lo
    for first, end in covered:
        if end <= at:
            continue
        if first >= hi:
            break
        if first > at:
            yield at, first
        at = max(at, end)
    if at < hi:
        yield at, hi


def _covered_count(lo: int, hi: int, covered: Sequence[tuple[int, int]]) -> int:
    return (hi - lo) - sum(e - f for f, e in _uncovered(lo, hi, covered)) if hi > lo else 0


def _write_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="snappy")
    os.replace(tmp, path)


class _Run:
    """Consecutive messages of one queue, contiguous in offset, of one date: one file."""

    def __init__(self) -> None:
        self.items: list[StoredMessage] = []
        self.date = ""

    def fits(self, message: StoredMessage, date: str, limit: int) -> bool:
        if not self.items:
            return True
        return (
            date == self.date
            and message.queue_offset == self.items[-1].queue_offset + 1
            and len(self.items) < limit
        )


def _export_queue(
    admin: SyncAdmin,
    topic: str,
    span: QueueSpan,
    covered: Sequence[tuple[int, int]],
    *,
    directory: Path,
    date_of: Callable[[StoredMessage], tuple[str, int]],
    to_table: Callable[[list[StoredMessage]], pa.Table],
    since_ms: int | None,
    page_size: int,
    rows_per_file: int,
) -> tuple[int, int, int]:
    """Export the offsets of one queue no file covers yet; returns (rows, files, skipped)."""
    rows = files = skipped = 0
    run = _Run()

    def flush() -> None:
        nonlocal rows, files
        if not run.items:
            return
        first, end = run.items[0].queue_offset, run.items[-1].queue_offset + 1
        name = _file_name(span.queue_id, first, end, span.broker_name)
        _write_atomic(to_table(run.items), directory / f"date={run.date}" / name)
        rows += len(run.items)
        files += 1
        run.items, run.date = [], ""

    for lo, hi in _uncovered(span.min_offset, span.max_offset, covered):
        for page in browse_range(
            admin, span.address, topic, span.queue_id, lo, hi, page_size=page_size
        ):
            for message in page:
                date, moment = date_of(message)
                if since_ms is not None and moment < since_ms:
                    skipped += 1
                    flush()
                    continue
                if not run.fits(message, date, rows_per_file):
                    flush()
                run.items.append(message)
                run.date = date
        flush()
    return rows, files, skipped


def _topic_date(message: StoredMessage) -> tuple[str, int]:
    return utc_date(message.store_timestamp), message.store_timestamp


def _history_date(message: StoredMessage) -> tuple[str, int]:
    # a packed record's attempts were recorded together: its first attempt dates them all
    delivered = DeliveryAttempt.from_ledger(message)[0].delivered_at
    return utc_date(delivered), delivered


def _topic_table(messages: list[StoredMessage]) -> pa.Table:
    return messages_table(messages).drop_columns(list(TOPIC_EXPORT_PARTITIONING))


def _history_table(messages: list[StoredMessage]) -> pa.Table:
    return attempts_table([a for m in messages for a in DeliveryAttempt.from_ledger(m)])


def _export_source(
    admin: SyncAdmin,
    kind: str,
    topic: str,
    root: Path,
    *,
    since_ms: int | None,
    page_size: int,
    rows_per_file: int,
    missing_ok: bool,
) -> ExportedSource:
    history = kind == "history"
    directory = root if history else root / f"topic={_quote(topic)}"
    spans = queue_spans(admin, topic, missing_ok=missing_ok)
    existing = exported_ranges(directory)
    rows = files = skipped = already = 0
    for span in spans:
        covered = existing.get((span.broker_name, span.queue_id), [])
        already += _covered_count(span.min_offset, span.max_offset, covered)
        r, f, s = _export_queue(
            admin,
            topic,
            span,
            covered,
            directory=directory,
            date_of=_history_date if history else _topic_date,
            to_table=_history_table if history else _topic_table,
            since_ms=since_ms,
            page_size=page_size,
            rows_per_file=rows_per_file,
        )
        rows, files, skipped = rows + r, files + f, skipped + s
    return ExportedSource(kind, topic, len(spans), rows, files, already, skipped, str(directory))


def _mark_empty(root: Path, schema: pa.Schema, partitioning: Iterable[str]) -> None:
    """Leave a schema-only file in an export root without data (so readers find a schema), and
    remove it once there is data (Spark refuses files beside partition directories)."""
    marker = root / _EMPTY
    has_data = any(root.rglob("part-*.parquet"))
    if has_data:
        marker.unlink(missing_ok=True)
    elif not marker.exists():
        empty = schema.empty_table().drop_columns(list(partitioning))
        _write_atomic(empty, marker)


def export_to_parquet(
    out: str | os.PathLike[str],
    *,
    servers: Sequence[str] | str | None = None,
    topics: Sequence[str] = (),
    all_topics: bool = False,
    dlq_groups: Sequence[str] = (),
    history: bool = False,
    since: datetime | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    rows_per_file: int = DEFAULT_ROWS_PER_FILE,
    client: ClientConfig | None = None,
    progress: Callable[[ExportedSource], None] | None = None,
) -> ExportSummary:
    """Export ``topics`` (or every non-system topic with ``all_topics``), the DLQs of
    ``dlq_groups`` and, with ``history``, the attempt history, under ``out``.

    Only offsets no earlier run exported are read (see the module documentation). A topic that
    does not exist is an error; a group without a DLQ (nothing dead-lettered yet) exports
    nothing. ``since`` (naive = UTC) skips older messages and attempts.
    """
    if not (topics or all_topics or dlq_groups or history):
        raise InvalidArgumentError("nothing to export: name topics, DLQ groups or the history")
    if rows_per_file < 1:
        raise InvalidArgumentError("rows_per_file must be at least 1")
    started = time.perf_counter()
    since_ms: int | None = None
    if since is not None:
        moment = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
        since_ms = int(moment.timestamp() * 1000)
    root = Path(out)
    done: list[ExportedSource] = []
    with SyncAdmin(servers=servers, client=client) as admin:
        names = list(dict.fromkeys(topics))
        if all_topics:
            listed = [t.name for t in admin.list_topics() if not t.name.startswith("%")]
            names += [t for t in listed if t not in names]
        jobs: list[tuple[str, str, Path, bool]] = [
            ("topic", t, root / TOPICS_DIR, False) for t in names
        ]
        jobs += [
            ("dlq", DLQ_TOPIC_PREFIX + g, root / DLQ_DIR, True) for g in dict.fromkeys(dlq_groups)
        ]
        if history:
            jobs.append(("history", HISTORY_TOPIC, root / HISTORY_DIR, True))
        for kind, topic, directory, missing_ok in jobs:
            source = _export_source(
                admin,
                kind,
                topic,
                directory,
                since_ms=since_ms,
                page_size=page_size,
                rows_per_file=rows_per_file,
                missing_ok=missing_ok,
            )
            done.append(source)
            if progress is not None:
                progress(source)
    if names:
        _mark_empty(root / TOPICS_DIR, TOPIC_EXPORT_SCHEMA, TOPIC_EXPORT_PARTITIONING)
    if dlq_groups:
        _mark_empty(root / DLQ_DIR, TOPIC_EXPORT_SCHEMA, TOPIC_EXPORT_PARTITIONING)
    if history:
        _mark_empty(root / HISTORY_DIR, ATTEMPT_HISTORY_SCHEMA, ())
    return ExportSummary(tuple(done), str(root), time.perf_counter() - started)
