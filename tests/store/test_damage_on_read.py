"""A damaged record below the verified part of the log is found when it is read: it is set aside
with one clear log line and its consumers move past it, instead of failing every read of its
queue forever."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pocketmq.store import GetStatus, MessageStore

from .conftest import SMALL, message

SEGMENT = "commitlog/00000000000000000000"


def test_a_damaged_old_record_is_skipped_and_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        results = store.put([message(i) for i in range(6)])
        store.put([message(i, queue_id=1) for i in range(200)])  # later segments
        assert store.statistics().segments > 2
    # bit rot in an old segment the checkpoint covers: recovery does not look at it again
    with open(directory / SEGMENT, "r+b") as handle:
        handle.seek(results[2].physical_offset + 60)
        handle.write(b"\x00\x00\x00")
    with MessageStore.open(str(directory), SMALL) as store:
        with caplog.at_level(logging.ERROR, logger="pocketmq.store"):
            got = store.get_messages("orders", 0, 0, max_count=100)
            again = store.get_messages("orders", 0, 2, max_count=100)
        assert [m.message_id for m in got.messages] == [f"MSG{i:06d}" for i in (0, 1, 3, 4, 5)]
        assert got.next_offset == 6
        assert again.status is GetStatus.FOUND
        assert again.messages[0].message_id == "MSG000003"
        reports = [r for r in caplog.records if "fails verification" in r.getMessage()]
        assert len(reports) == 1
        assert "orders/0 at queue offset 2" in reports[0].getMessage()
        [aside] = store.quarantined()
        assert aside.start == results[2].physical_offset
        assert store.statistics().damaged_records_read == 1
        assert (directory / "quarantine" / aside.saved).stat().st_size == results[2].size
    with MessageStore.open(str(directory), SMALL) as store:  # remembered across restarts
        only = store.get_messages("orders", 0, 2, max_count=1)
        assert [m.message_id for m in only.messages] == ["MSG000003"]


def test_a_damaged_queue_entry_is_repaired_from_the_log_not_quarantined(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(i, queue_id=i % 2) for i in range(12)])
    # flip a bit of the physical offset of entry 3 of queue 0 (message 6)
    queue_file = directory / "consumequeue" / "orders" / "0" / f"{0:020d}"
    with open(queue_file, "r+b") as handle:
        handle.seek(3 * 20)
        byte = handle.read(1)[0]
        handle.seek(3 * 20)
        handle.write(bytes([byte ^ 0x04]))
    with MessageStore.open(str(directory), SMALL) as store:
        got = store.get_messages("orders", 0, 0, max_count=100)
        assert [m.message_id for m in got.messages] == [f"MSG{i:06d}" for i in range(0, 12, 2)]
        # no healthy record was set aside on the word of the damaged entry
        assert store.quarantined() == []
        other = store.get_messages("orders", 1, 0, max_count=100)
        assert len(other.messages) == 6
    with MessageStore.open(str(directory), SMALL) as store:  # the entry was rewritten
        assert (
            store.read_queue("orders", 0, 3, 1)[0].physical_offset
            == got.messages[3].physical_offset
        )
