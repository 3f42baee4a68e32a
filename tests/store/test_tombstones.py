"""Deleting a topic survives a rebuild of the queues from the log: the old messages never come
back, and never mix into a re-created topic of the same name."""

from __future__ import annotations

import shutil
from pathlib import Path

from pocketmq.store import MessageStore, PutStatus

from .conftest import SMALL, message


def _ids(store: MessageStore) -> list[str]:
    got = store.get_messages("orders", 0, 0, max_count=100)
    return [m.message_id for m in got.messages]


def test_a_deleted_topic_stays_deleted_when_the_queues_are_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(i) for i in range(5)])  # old-0 .. old-4
        assert store.delete_topic("orders").status is PutStatus.PUT_OK
        assert _ids(store) == []
        store.put([message(100 + i) for i in range(2)])  # the re-created topic
        assert _ids(store) == ["MSG000100", "MSG000101"]
    shutil.rmtree(directory / "consumequeue")
    (directory / "checkpoint").unlink()
    with MessageStore.open(str(directory), SMALL) as store:
        assert _ids(store) == ["MSG000100", "MSG000101"]
        assert store.get_messages("orders", 0, 0).messages[0].queue_offset == 0


def test_a_crash_right_after_a_delete_replays_the_tombstone(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(i) for i in range(5)])
        store.flush()
        store.delete_topic("orders")
        store.put([message(7)])
        copy = tmp_path / "crashed"
        shutil.copytree(directory, copy)
    # the crash left the old queue files in place (as if the delete had not reached the disk)
    shutil.rmtree(copy / "consumequeue" / "orders")
    shutil.copytree(tmp_path / "s" / "consumequeue" / "orders", copy / "consumequeue" / "orders")
    with MessageStore.open(str(copy), SMALL) as store:
        assert _ids(store) == ["MSG000007"]


def test_a_delete_that_cannot_write_its_tombstone_deletes_nothing(tmp_path: Path) -> None:
    import dataclasses

    config = dataclasses.replace(SMALL, min_free_disk_bytes=2**62)
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.put([message(i) for i in range(3)])
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        result = store.delete_topic("orders")
        assert result.status is PutStatus.DISK_FULL
        assert len(_ids(store)) == 3
