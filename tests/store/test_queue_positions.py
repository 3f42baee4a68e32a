"""A queue offset is given to one message only, even after a crash lost the queue's tail: a
consumer that moved past an offset must still see the next message stored there."""

from __future__ import annotations

import os
from pathlib import Path

from pocketmq.store import GetStatus, MessageStore

from .conftest import SMALL, crash_copy, message

SEGMENT = "commitlog/00000000000000000000"


def _ids(store: MessageStore, offset: int = 0) -> list[str]:
    got = store.get_messages("orders", 0, offset, max_count=1000)
    return [m.message_id for m in got.messages]


def test_offsets_consumed_before_a_lost_tail_are_not_handed_out_again(tmp_path: Path) -> None:
    live = tmp_path / "live"
    with MessageStore.open(str(live), SMALL) as store:
        store.put([message(i) for i in range(10)])
    store = MessageStore.open(str(live), SMALL)
    results = store.put([message(i) for i in range(10, 20)])
    crashed = crash_copy(live, tmp_path / "crashed")
    store.close()
    # the machine crashed: the log lost the last 10 records, the queue file did not
    os.truncate(crashed / SEGMENT, results[0].physical_offset)
    with MessageStore.open(str(crashed), SMALL) as store:
        assert store.max_offset("orders", 0) == 20
        # a consumer had committed offset 20; the next message goes there, not to offset 10
        [new] = store.put([message(100)])
        assert new.queue_offset == 20
        assert _ids(store, 20) == ["MSG000100"]
        skipped = store.get_messages("orders", 0, 10)
        assert skipped.status is GetStatus.FOUND  # holes are stepped over
        assert [m.message_id for m in skipped.messages] == ["MSG000100"]


def test_a_broker_can_reserve_offsets_it_knows_were_consumed(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.put([message(i) for i in range(3)])
        # committed offsets say 7 messages were consumed, the queue lost 4 of them
        assert store.reserve_queue_offset("orders", 0, 7) == 4
        assert store.reserve_queue_offset("orders", 0, 5) == 0  # already beyond
        [new] = store.put([message(9)])
        assert new.queue_offset == 7
        assert _ids(store) == ["MSG000000", "MSG000001", "MSG000002", "MSG000009"]
        # an absurd committed offset does not fill the disk with holes
        assert store.reserve_queue_offset("orders", 0, 10**12) == 0
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        assert store.max_offset("orders", 0) == 8
        [after] = store.put([message(10)])
        assert after.queue_offset == 8


def test_reserved_offsets_survive_a_rebuild_of_the_queues(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.put([message(i) for i in range(3)])
        store.reserve_queue_offset("orders", 0, 40)
    # lose the queue files: they are rebuilt from the log, the checkpoint keeps the floor
    for path in sorted((directory / "consumequeue" / "orders" / "0").iterdir()):
        path.unlink()
    with MessageStore.open(str(directory), SMALL) as store:
        assert store.max_offset("orders", 0) == 40
        assert _ids(store) == ["MSG000000", "MSG000001", "MSG000002"]
