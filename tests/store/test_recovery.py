"""Crash recovery: torn tails are cut, damage elsewhere is set aside with every intact record
kept, confirmed data is never silently dropped, and the queues and index come back from the log.

A "crash" is a copy of the data directory taken while the store is still open: exactly what the
page cache holds, with whatever checkpoint was last written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from pocketmq.errors import StoreCorruptedError
from pocketmq.store import GetStatus, MessageStore, RecoveryMode
from pocketmq.store.record import FIXED_HEADER_SIZE

from .conftest import SMALL, crash_copy, message

SEGMENT = "commitlog/00000000000000000000"


def _prepare_crashed(tmp_path: Path, committed: int, unflushed: int) -> tuple[Path, int, int]:
    """A crashed store: ``committed`` messages covered by the checkpoint, then ``unflushed``
    more that are not. Returns (directory, start of the last record, end of the last record)."""
    source = tmp_path / "live"
    with MessageStore.open(str(source), SMALL) as s:
        s.put([message(i) for i in range(committed)])
    s = MessageStore.open(str(source), SMALL)
    results = s.put([message(committed + i) for i in range(unflushed)])
    crashed = crash_copy(source, tmp_path / "crashed")
    s.close()
    last = results[-1]
    return crashed, last.physical_offset, last.physical_offset + last.size


QUARANTINING = dataclasses.replace(SMALL, recovery=RecoveryMode.QUARANTINE)


def _ids(store: MessageStore) -> list[str]:
    return [m.message_id for m in store.get_messages("orders", 0, 0, max_count=1000).messages]


def test_a_crash_loses_nothing_that_was_written(tmp_path: Path) -> None:
    crashed, _, _ = _prepare_crashed(tmp_path, committed=5, unflushed=5)
    assert (crashed / "abort").exists()
    with MessageStore.open(str(crashed), SMALL) as s:
        assert _ids(s) == [f"MSG{i:06d}" for i in range(10)]
        assert s.query_by_id("MSG000009")[0].queue_offset == 9


def _cuts(start: int, end: int, every_byte: bool) -> list[int]:
    """Where to cut the last record: every byte, or (the quick run) every 7th byte plus the
    edges where recovery's reading changes: the record's first bytes, either side of the
    fixed header's end and of the topic's length, and its last bytes."""
    if every_byte:
        return list(range(start, end))
    header_end = start + FIXED_HEADER_SIZE
    edges = {
        start + 1,
        header_end - 1,
        header_end,
        header_end + 1,
        header_end + 2,
        end - 2,
        end - 1,
    }
    return sorted({*range(start, end, 7), *edges})


@pytest.mark.parametrize(
    "every_byte", [pytest.param(True, marks=pytest.mark.slow, id="every-byte"), False]
)
def test_truncation_at_every_byte_of_the_last_record(tmp_path: Path, every_byte: bool) -> None:
    base, start, end = _prepare_crashed(tmp_path, committed=3, unflushed=2)
    cuts = _cuts(start, end, every_byte)
    assert every_byte or len(cuts) < (end - start) / 2
    for cut in cuts:
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(base, work)
        os.truncate(work / SEGMENT, cut)
        with MessageStore.open(str(work), SMALL) as s:
            assert _ids(s) == [f"MSG{i:06d}" for i in range(4)], cut
            assert s.statistics().write_position == start
            # the torn bytes are kept aside, not destroyed
            torn = [q for q in s.quarantined() if q.kind == "torn"]
            assert len(torn) == (cut > start)
            if torn:
                assert (work / "quarantine" / torn[0].saved).read_bytes() != b""
            [r] = s.put([message(100)])
            # the lost record's queue position is a hole: a consumer may have read it already
            assert r.queue_offset == 5
            assert r.physical_offset == start
        with MessageStore.open(str(work), SMALL) as s:
            assert _ids(s)[-1] == "MSG000100"
            assert s.query_by_id("MSG000100")[0].queue_offset == 5
            assert s.query_by_id("MSG000004") == []
        shutil.rmtree(work)


def test_a_flipped_bit_in_the_unflushed_tail_drops_only_that_record(tmp_path: Path) -> None:
    base, start, end = _prepare_crashed(tmp_path, committed=3, unflushed=1)
    for position in range(start, end, 7):
        for bit in (0, 5):
            work = tmp_path / f"flip-{position}-{bit}"
            shutil.copytree(base, work)
            with open(work / SEGMENT, "r+b") as f:
                f.seek(position)
                byte = f.read(1)[0]
                f.seek(position)
                f.write(bytes([byte ^ (1 << bit)]))
            with MessageStore.open(str(work), SMALL) as s:
                assert _ids(s) == ["MSG000000", "MSG000001", "MSG000002"], (position, bit)
                [r] = s.put([message(7)])
                assert r.physical_offset == start
            with MessageStore.open(str(work), SMALL) as s:
                assert _ids(s)[-1] == "MSG000007"
            shutil.rmtree(work)


def _damage_inside(tmp_path: Path) -> tuple[Path, list[int]]:
    """Five records, all flushed; then a byte of record 3 is changed and the process 'crashed'
    with its checkpoint lost."""
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as s:
        results = s.put([message(i) for i in range(5)])
    with open(directory / SEGMENT, "r+b") as f:
        f.seek(results[3].physical_offset + 50)
        f.write(b"\xff")
    (directory / "abort").touch()
    os.unlink(directory / "checkpoint")
    return directory, [r.physical_offset for r in results]


def test_without_a_checkpoint_the_flush_marker_still_protects_confirmed_records(
    tmp_path: Path,
) -> None:
    directory, offsets = _damage_inside(tmp_path)
    # the marker says all five were fsynced: damaged confirmed data is an operator's decision
    with pytest.raises(StoreCorruptedError, match="confirmed durable") as info:
        MessageStore.open(str(directory), SMALL)
    assert info.value.offset == offsets[3]
    with MessageStore.open(str(directory), QUARANTINING) as s:
        assert _ids(s) == ["MSG000000", "MSG000001", "MSG000002", "MSG000004"]


def test_damage_with_intact_records_after_it_is_never_cut_off(tmp_path: Path) -> None:
    directory, offsets = _damage_inside(tmp_path)
    os.unlink(directory / "flushed")  # no checkpoint, no marker: nothing known durable
    with MessageStore.open(str(directory), SMALL) as s:
        # only the damaged record is lost; the one after it is kept (it used to be truncated)
        assert _ids(s) == ["MSG000000", "MSG000001", "MSG000002", "MSG000004"]
        [aside] = s.quarantined()
        assert (aside.kind, aside.start, aside.end) == ("damaged", offsets[3], offsets[4])
        assert [(e.topic, e.queue_offset) for e in aside.lost] == [("orders", 3)]
        [r] = s.put([message(9)])
        assert r.queue_offset == 5
    with MessageStore.open(str(directory), SMALL) as s:  # known damage: no second report
        assert len(s.quarantined()) == 1
        assert _ids(s)[-1] == "MSG000009"


def _confirmed_then_crashed(tmp_path: Path) -> tuple[Path, list[int]]:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as s:
        s.put([message(i) for i in range(3)])
    s = MessageStore.open(str(directory), SMALL)
    results = s.put([message(i) for i in range(3, 6)])
    s.flush()  # the checkpoint now covers records 0..5
    crashed = crash_copy(directory, tmp_path / "crashed")
    s.close()
    return crashed, [r.physical_offset for r in results]


def test_damage_to_confirmed_data_refuses_to_open_unless_quarantine_is_chosen(
    tmp_path: Path,
) -> None:
    crashed, offsets = _confirmed_then_crashed(tmp_path)
    with open(crashed / SEGMENT, "r+b") as f:
        f.seek(offsets[1] + 30)
        f.write(b"\x00\x01\x02")
    with pytest.raises(StoreCorruptedError) as info:
        MessageStore.open(str(crashed), SMALL)
    assert info.value.offset == offsets[1]
    assert info.value.path.endswith(SEGMENT)
    assert "pocketmq store repair" in str(info.value)
    with MessageStore.open(str(crashed), QUARANTINING) as s:
        assert _ids(s) == [f"MSG{i:06d}" for i in (0, 1, 2, 3, 5)]
        [aside] = s.quarantined()
        assert aside.kind == "damaged"
        saved = (crashed / "quarantine" / aside.saved).read_bytes()
        assert len(saved) == offsets[2] - offsets[1]
        assert saved[30:33] == b"\x00\x01\x02"
    with MessageStore.open(str(crashed), SMALL) as s:  # set aside once: strict opens again
        assert len(_ids(s)) == 5


def test_a_log_shorter_than_its_checkpoint_refuses_to_open(tmp_path: Path) -> None:
    crashed, offsets = _confirmed_then_crashed(tmp_path)
    os.truncate(crashed / SEGMENT, offsets[2])
    with pytest.raises(StoreCorruptedError, match="ends before data it confirmed durable"):
        MessageStore.open(str(crashed), SMALL)
    with MessageStore.open(str(crashed), QUARANTINING) as s:
        assert len(_ids(s)) == 5
        assert [q.kind for q in s.quarantined()] == ["missing"]


def test_a_missing_consume_queue_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as s:
        s.put([message(i, queue_id=i % 2) for i in range(40)])
    shutil.rmtree(directory / "consumequeue" / "orders" / "1")
    with MessageStore.open(str(directory), SMALL) as s:
        got = s.get_messages("orders", 1, 0, max_count=100)
        assert [m.message_id for m in got.messages] == [f"MSG{i:06d}" for i in range(1, 40, 2)]


def test_a_missing_index_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as s:
        s.put([message(i) for i in range(40)])
    shutil.rmtree(directory / "index")
    with MessageStore.open(str(directory), SMALL) as s:
        assert s.query_by_id("MSG000017")[0].queue_offset == 17
        assert len(s.query_by_key("orders", "batch-2")) == 10


def test_a_torn_checkpoint_means_a_full_verification(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as s:
        s.put([message(i) for i in range(20)])
    (directory / "checkpoint").write_bytes(b'{"version": 1, "commitlog_fl')
    with MessageStore.open(str(directory), SMALL) as s:
        assert len(_ids(s)) == 20
        assert s.query_by_id("MSG000019")


def test_consume_queue_entries_past_a_truncated_log_become_holes(tmp_path: Path) -> None:
    base, start, _ = _prepare_crashed(tmp_path, committed=2, unflushed=3)
    os.truncate(base / SEGMENT, start)  # lose the last record; its queue entry remains
    with MessageStore.open(str(base), SMALL) as s:
        assert s.max_offset("orders", 0) == 5  # offset 4 is never handed out again
        got = s.get_messages("orders", 0, 4)
        assert (got.status, got.next_offset) == (GetStatus.MESSAGE_WAS_REMOVING, 5)


def test_an_emptied_last_queue_file_does_not_delete_the_one_before(tmp_path: Path) -> None:
    """Recovery trims entries past the log's end; a queue file left empty reads as zeros."""
    from pocketmq.store.consumequeue import ConsumeQueue
    from pocketmq.store.openfiles import OpenFiles

    files = OpenFiles(16)
    queue = ConsumeQueue(str(tmp_path / "q"), "T", 0, 4, files)
    for offset in range(5):  # entry 4 opens the second file
        queue.put_one(offset, physical_offset=100 * offset, size=100, tag_code=0)
    queue.close()

    reopened = ConsumeQueue(str(tmp_path / "q"), "T", 0, 4, files)
    assert reopened.load() == 5
    assert reopened.trim(log_end=400) == [4]  # record 4 was lost from the log
    assert reopened.max_offset == 5
    reopened.set_min_physical(0)
    assert reopened.min_offset == 0
    assert [e.physical_offset for e in reopened.read(0, 4)] == [0, 100, 200, 300]
    reopened.close()
