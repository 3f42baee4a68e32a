"""Consume-queue files do not hold a descriptor each forever: the store keeps a bounded number
open and closes the least recently used, flushing written ones first."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pocketmq.store import MessageStore, PutStatus

from .conftest import SMALL, message

CAPPED = dataclasses.replace(SMALL, max_open_queue_files=16)


def _queue_descriptors(directory: Path) -> int:
    """Descriptors of this process open on consume-queue files under ``directory``."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        count += target.startswith(str(directory / "consumequeue"))
    return count


def test_a_thousand_queues_do_not_hold_a_thousand_descriptors(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), CAPPED) as store:
        for queue_id in range(1024):
            [result] = store.put([message(queue_id, queue_id=queue_id)])
            assert result.status is PutStatus.PUT_OK
        store.flush()  # written files are flushed, after which they may be closed
        store.put([message(0, queue_id=0)])
        assert store.statistics().open_queue_files <= 16
        assert _queue_descriptors(tmp_path / "s") <= 16
        for queue_id in (0, 511, 1023):  # closed files are opened again to be read
            got = store.get_messages("orders", queue_id, 0)
            assert got.messages[0].message_id == f"MSG{queue_id:06d}"
    with MessageStore.open(str(tmp_path / "s"), CAPPED) as store:
        assert store.max_offset("orders", 0) == 2
        assert store.max_offset("orders", 1023) == 1
