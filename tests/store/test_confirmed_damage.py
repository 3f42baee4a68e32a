"""Damage to records the store acknowledged is never mistaken for a torn final write.

The checkpoint is written at most once a second; with sync flush, every record acknowledged
since then was fsynced too. Recovery used to call any damage past the checkpoint a "torn tail"
and cut the log there, dropping every acknowledged record behind it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from pocketmq.errors import StoreCorruptedError
from pocketmq.store import FlushMode, MessageStore, RecoveryMode

from .conftest import SMALL, crash_copy, message

SYNC = dataclasses.replace(SMALL, flush_mode=FlushMode.SYNC, segment_size=64 * 1024)
QUARANTINE = dataclasses.replace(SYNC, recovery=RecoveryMode.QUARANTINE)


def _ids(store: MessageStore) -> list[str]:
    got = store.get_messages("orders", 0, 0, max_count=1000)
    return [m.message_id for m in got.messages]


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0x10]))


def _acknowledged_after_the_checkpoint(tmp_path: Path, count: int) -> tuple[Path, list[int]]:
    """``count`` records acknowledged one by one under sync flush, none covered by a
    checkpoint (it is written once an hour here); then the process dies."""
    live = tmp_path / "live"
    store = MessageStore.open(str(live), SYNC)
    offsets = []
    for i in range(count):
        [result] = store.put([message(i)])
        assert result.status.value == "PUT_OK"
        offsets.append(result.physical_offset)
    offsets.append(result.physical_offset + result.size)  # the end of the last one
    crashed = crash_copy(live, tmp_path / "crashed")
    store.close()
    return crashed, offsets


def test_one_flipped_byte_in_acknowledged_records_does_not_cut_the_log(tmp_path: Path) -> None:
    crashed, offsets = _acknowledged_after_the_checkpoint(tmp_path, 300)
    segment = crashed / "commitlog" / f"{offsets[75] // SYNC.segment_size * SYNC.segment_size:020d}"
    _flip(segment, offsets[75] - offsets[75] // SYNC.segment_size * SYNC.segment_size + 40)
    # strict (the default): every record was acknowledged as durable, so an operator decides
    with pytest.raises(StoreCorruptedError, match="confirmed durable") as info:
        MessageStore.open(str(crashed), SYNC)
    assert info.value.offset == offsets[75]
    with MessageStore.open(str(crashed), QUARANTINE) as store:
        ids = _ids(store)
        assert len(ids) == 299  # only the damaged record is lost, not the 225 behind it
        assert "MSG000075" not in ids
        assert ids[-1] == "MSG000299"


def test_without_checkpoint_or_marker_damage_in_an_early_segment_keeps_the_later_ones(
    tmp_path: Path,
) -> None:
    crashed, offsets = _acknowledged_after_the_checkpoint(tmp_path, 800)
    segments = sorted((crashed / "commitlog").iterdir())
    assert len(segments) >= 3
    os.unlink(crashed / "flushed")
    (crashed / "checkpoint").unlink(missing_ok=True)
    _flip(segments[0], offsets[10] + 40)
    with MessageStore.open(str(crashed), SYNC) as store:
        ids = _ids(store)
        assert len(ids) == 799
        assert ids[-1] == "MSG000799"


def test_a_torn_final_write_is_still_cut(tmp_path: Path) -> None:
    crashed, offsets = _acknowledged_after_the_checkpoint(tmp_path, 20)
    # a write that never completed: bytes after the last acknowledged record
    segment = crashed / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as handle:
        end = offsets[-1]
        handle.seek(end)
        handle.write(b"\x90\x01\x00\x00\x01QMP" + b"\x07" * 50)
    with MessageStore.open(str(crashed), SYNC) as store:
        assert len(_ids(store)) == 20
        assert store.statistics().write_position == end
        [torn] = store.quarantined()
        assert (torn.kind, torn.start) == ("torn", end)
