"""``Reader.get_messages`` reads, verifies and keeps a pull's records in one pass over each run of
adjacent records (docs/benchmarks.md, "Broker pull path, fused (issue 32)"); the version before,
kept here, is what it must answer: the same messages, statuses and offsets over random queues
with holes, tag filters, byte and count budgets, scan limits and a visible limit, and the same
quarantine and repairs over damaged records and entries."""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pocketmq.store import GetResult, GetStatus, MessageStore, StoreMessage
from pocketmq.store import _readpass as readpass
from pocketmq.store import reader as reader_module
from pocketmq.store.consumequeue import ENTRY
from pocketmq.store.reader import Reader, _nothing_found, _outside
from pocketmq.store.record import RecordError, compute_tag_code, decode_record
from tests.twins import compiled_twin

from .conftest import SMALL

TAGS = ["a", "b", ""]


def _before_read_records(
    reader: Any, batch: list[tuple[int, int, int]], topic: str, queue_id: int
) -> list[Any]:
    out: list[Any] = []
    i = 0
    commitlog = reader._commitlog
    while i < len(batch):
        _, start, size = batch[i]
        end = start + size
        j = i + 1
        segment_end = start - start % commitlog.segment_size + commitlog.segment_size
        while j < len(batch) and batch[j][1] == end and end - start < readpass.MAX_COALESCED_READ:
            if batch[j][1] + batch[j][2] > segment_end:
                break
            end += batch[j][2]
            j += 1
        data = commitlog.read(start, end - start)
        if data is not None:
            for queue_offset, physical, entry_size in batch[i:j]:
                try:
                    out.append(
                        decode_record(data, physical - start, expected_physical_offset=physical)
                    )
                except RecordError as exc:
                    repaired = reader._unreadable_entry(
                        topic, queue_id, queue_offset, physical, entry_size, exc.reason
                    )
                    if repaired is not None:
                        out.append(repaired)
        i = j
    return out


def before_get_messages(
    reader: Reader,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_count: int = 32,
    max_bytes: int = 4 * 1024 * 1024,
    tags: frozenset[str] | None = None,
    max_scan: int = 1024,
) -> GetResult:
    """``Reader.get_messages`` as it was before the fused pass (its three loops)."""
    r: Any = reader
    queue = r._queues.get((topic, queue_id))
    outside = _outside(queue, offset)
    if outside is not None:
        return outside
    low, high = queue.min_offset, queue.max_offset
    codes = {compute_tag_code(t) for t in tags} if tags is not None else None
    log_min = r._commitlog.min_offset
    quarantine = r._quarantine if r._quarantine.skipping else None
    limit = reader.visible_limit
    messages: list[Any] = []
    size_total = 0
    cursor = offset
    scanned = 0
    removed = False
    held = False
    while cursor < high and len(messages) < max_count and scanned < max_scan and not held:
        raw = queue.read_raw(cursor, min(max_scan - scanned, max(max_count * 2, 64)))
        if not raw:
            break
        batch: list[tuple[int, int, int]] = []
        for physical, size, code in ENTRY.iter_unpack(raw):
            if limit is not None and size and physical + size > limit:
                held = True
                break
            cursor += 1
            scanned += 1
            if physical < log_min or size == 0:
                removed = True
                continue
            if quarantine is not None and quarantine.covering(physical) is not None:
                removed = True
                continue
            if codes is not None and code not in codes:
                continue
            batch.append((cursor - 1, physical, size))
            if len(messages) + len(batch) >= max_count or size_total + size > max_bytes:
                break
        records = _before_read_records(r, batch, topic, queue_id)
        if len(records) < len(batch):
            removed = True
        for record in records:
            if tags is not None and record.tag not in tags:
                continue
            if messages and size_total + record.size > max_bytes:
                cursor = record.queue_offset
                break
            messages.append(record)
            size_total += record.size
        if size_total >= max_bytes:
            break
    if messages:
        return GetResult(GetStatus.FOUND, messages, cursor, low, high)
    return GetResult(_nothing_found(held and cursor == offset, removed), [], cursor, low, high)


def _fill(directory: Path, seed: int, count: int) -> list[int]:
    """A store of ``count`` messages over 3 queues (runs of adjacent records and interleaved ones,
    bodies up to 3 KiB over 16 KiB segments); returns each record's physical offset."""
    rng = random.Random(seed)
    physicals: list[int] = []
    with MessageStore.open(str(directory), SMALL) as store:
        n = 0
        while n < count:
            queue = rng.randrange(3)
            batch = [
                StoreMessage(
                    topic="t",
                    queue_id=queue,
                    body=b"x" * rng.randrange(3000),
                    properties={"UNIQ_KEY": f"M{n + i}", "TAGS": rng.choice(TAGS)},
                )
                for i in range(min(rng.randrange(1, 6), count - n))
            ]
            physicals += [r.physical_offset for r in store.put(batch)]
            n += len(batch)
    return physicals


def _answer(got: GetResult) -> tuple[Any, ...]:
    return (got.status, got.messages, got.next_offset, got.min_offset, got.max_offset)


reads = st.tuples(
    st.integers(0, 3),  # queue (3: none)
    st.integers(0, 40),  # offset
    st.integers(1, 40),  # max_count
    st.integers(1, 20_000),  # max_bytes
    st.one_of(st.none(), st.frozensets(st.sampled_from(TAGS))),
    st.integers(1, 80),  # max_scan
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    count=st.integers(1, 80),
    holes=st.lists(st.integers(0, 40), max_size=6),
    limit_at=st.one_of(st.none(), st.integers(0, 79)),
    queries=st.lists(reads, min_size=1, max_size=12),
)
def test_the_fused_read_answers_what_the_three_loops_did(
    seed: int,
    count: int,
    holes: list[int],
    limit_at: int | None,
    queries: list[tuple[int, int, int, int, frozenset[str] | None, int]],
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "s"
        physicals = _fill(directory, seed, count)
        with MessageStore.open(str(directory), SMALL) as store:
            reader = store._reader
            for offset in holes:  # positions whose messages are gone
                queue = reader._queues.get(("t", 0))
                if queue is not None and offset < queue.max_offset:
                    queue.put_holes([offset], 0)
            if limit_at is not None:
                reader.visible_limit = physicals[min(limit_at, len(physicals) - 1)]
            for queue_id, offset, max_count, max_bytes, tags, max_scan in queries:
                args = ("t", queue_id, offset)
                budget = {"max_count": max_count, "max_bytes": max_bytes, "tags": tags}
                fused = reader.get_messages(*args, **budget, max_scan=max_scan)
                before = before_get_messages(reader, *args, **budget, max_scan=max_scan)
                assert _answer(fused) == _answer(before)


def _damage(directory: Path, physical: int, at: int) -> None:
    segment = physical - physical % SMALL.segment_size
    with open(directory / "commitlog" / f"{segment:020d}", "r+b") as handle:
        handle.seek(physical - segment + at)
        byte = handle.read(1)[0]
        handle.seek(physical - segment + at)
        handle.write(bytes([byte ^ 0x10]))


def _flip_entry(directory: Path, queue_id: int, offset: int) -> None:
    per_file = SMALL.consume_queue_entries_per_file
    base = offset - offset % per_file
    path = directory / "consumequeue" / "t" / str(queue_id) / f"{base:020d}"
    if not path.exists() or path.stat().st_size <= (offset - base) * ENTRY.size:
        return  # the random fill gave this queue no message there: nothing to damage
    with open(path, "r+b") as handle:
        handle.seek((offset - base) * ENTRY.size)
        byte = handle.read(1)[0]
        handle.seek((offset - base) * ENTRY.size)
        handle.write(bytes([byte ^ 0x04]))


def _damaged_store(
    source: Path, seed: int, damaged: list[tuple[int, int]], flipped: list[tuple[int, int]]
) -> list[int]:
    """A store of 30 messages (``_fill``) with ``damaged`` records (index, byte) and ``flipped``
    queue entries (queue, offset); returns each record's physical offset."""
    physicals = _fill(source, seed, 30)
    with MessageStore.open(str(source), SMALL) as store:  # later segments: a checkpoint
        store.put([StoreMessage(topic="u", queue_id=0, body=b"y" * 2000)] * 24)
    for record, at in damaged:
        _damage(source, physicals[record], at)
    for queue_id, offset in flipped:
        _flip_entry(source, queue_id, offset)
    return physicals


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    damaged=st.lists(st.tuples(st.integers(0, 29), st.sampled_from([20, 60, 140])), max_size=4),
    flipped=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=2),
    budgets=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 9000)), min_size=1, max_size=4),
)
def test_damaged_records_and_entries_are_met_as_before(
    seed: int,
    damaged: list[tuple[int, int]],
    flipped: list[tuple[int, int]],
    budgets: list[tuple[int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "s"
        _damaged_store(source, seed, damaged, flipped)
        answers = []
        for read in (Reader.get_messages, before_get_messages):
            copy = Path(scratch) / read.__name__
            shutil.copytree(source, copy)
            with MessageStore.open(str(copy), SMALL) as store:
                reader = store._reader
                seen = []
                for queue_id in range(3):
                    offset = 0
                    for max_count, max_bytes in budgets * 8:
                        got = read(
                            reader, "t", queue_id, offset, max_count=max_count, max_bytes=max_bytes
                        )
                        seen.append(_answer(got))
                        offset = got.next_offset
                quarantined = [(q.start, q.end, q.lost) for q in store.quarantined()]
                entries = [store.read_queue("t", q, 0, 64) for q in range(3)]
                answers.append((seen, quarantined, entries, reader.damaged_reads))
        assert answers[0] == answers[1]


def test_a_record_past_the_byte_budget_is_read_once(tmp_path: Path) -> None:
    """The budget's stop ends the read: before, a stop below ``max_bytes`` went round the loop
    again from the record that did not fit, reading it once per entry of ``max_scan``."""
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.put([StoreMessage(topic="t", queue_id=0, body=b"x" * 1000) for _ in range(40)])
        store._reader.forget_appended()  # read from the log, not from what the append kept
        reads: list[tuple[int, int]] = []

        class Counted:
            """The reader's commit log, its reads counted (a compiled ``CommitLog`` takes no
            instance attribute, so the method is not replaced on it)."""

            def __init__(self, log: Any) -> None:
                self._log = log

            def read(self, offset: int, size: int) -> bytes | None:
                reads.append((offset, size))
                return self._log.read(offset, size)  # type: ignore[no-any-return]

            def __getattr__(self, name: str) -> Any:
                return getattr(self._log, name)

        store._reader._commitlog = Counted(store._reader._commitlog)  # type: ignore[assignment]
        got = store.get_messages("t", 0, 0, max_count=8, max_bytes=2500)
        assert (got.status, len(got.messages), got.next_offset) == (GetStatus.FOUND, 2, 2)
        assert len(reads) == 1  # the first 8 records, adjacent in the first segment


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    holes=st.lists(st.integers(0, 12), max_size=4),
    limit_at=st.one_of(st.none(), st.integers(0, 29)),
    damaged=st.lists(st.tuples(st.integers(0, 29), st.sampled_from([20, 60, 140])), max_size=3),
    flipped=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=2),
    queries=st.lists(reads, min_size=1, max_size=8),
)
def test_the_entries_loop_is_the_same_pure_and_compiled(
    seed: int,
    holes: list[int],
    limit_at: int | None,
    damaged: list[tuple[int, int]],
    flipped: list[tuple[int, int]],
    queries: list[tuple[int, int, int, int, frozenset[str] | None, int]],
) -> None:
    """``_readpass.read_entries`` (the entries' loop, compiled by the build) answers the same
    pure and compiled over stores with holes, a visible limit, damaged records and entries: the
    same answers, quarantine, repaired entries and damaged read counts."""
    fast = compiled_twin("pocketmq.store._readpass")
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "s"
        physicals = _damaged_store(source, seed, damaged, flipped)
        answers = []
        for module in (readpass, fast):
            copy = Path(scratch) / module.__name__
            shutil.copytree(source, copy)
            with MessageStore.open(str(copy), SMALL) as store:
                reader = store._reader
                for offset in holes:
                    queue = reader._queues.get(("t", 0))
                    if queue is not None and offset < queue.max_offset:
                        queue.put_holes([offset], 0)
                if limit_at is not None:
                    reader.visible_limit = physicals[limit_at]
                seen = []
                with _entries_loop(module):
                    for queue_id, offset, max_count, max_bytes, tags, max_scan in queries:
                        got = reader.get_messages(
                            "t",
                            queue_id,
                            offset,
                            max_count=max_count,
                            max_bytes=max_bytes,
                            tags=tags,
                            max_scan=max_scan,
                        )
                        seen.append(_answer(got))
                quarantined = [(q.start, q.end, q.lost) for q in store.quarantined()]
                entries = [store.read_queue("t", q, 0, 64) for q in range(3)]
                answers.append((seen, quarantined, entries, reader.damaged_reads))
        assert answers[0] == answers[1]


@contextlib.contextmanager
def _entries_loop(module: Any) -> Iterator[None]:
    """``store/reader.py`` calling ``module``'s ``read_entries`` for the block."""
    before = reader_module.read_entries
    reader_module.read_entries = module.read_entries
    try:
        yield
    finally:
        reader_module.read_entries = before
