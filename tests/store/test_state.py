"""The store's helpers work over a bare :class:`StoreState`, with no ``MessageStore`` around."""

from __future__ import annotations

import errno
from pathlib import Path

from pocketmq.store import PutStatus
from pocketmq.store.reader import Reader
from pocketmq.store.state import StoreState
from pocketmq.store.writer import Writer

from .conftest import SMALL, message


def _state(path: Path) -> StoreState:
    path.mkdir()
    return StoreState(str(path), SMALL, lambda: 1_700_000_000.0)


def test_a_writer_and_a_reader_share_one_bare_state(tmp_path: Path) -> None:
    state = _state(tmp_path / "store")
    writer, reader = Writer(state), Reader(state)
    with state.lock:
        results = writer.append([message(i, queue_id=i % 2) for i in range(5)])
    assert [r.queue_offset for r in results] == [0, 0, 1, 1, 2]
    assert [r.store_timestamp for r in results] == [1_700_000_000_000] * 5  # the state's clock
    got = reader.get_messages("orders", 1, 0, max_count=10)
    assert [m.message_id for m in got.messages] == ["MSG000001", "MSG000003"]
    assert state.commitlog.write_position == results[-1].physical_offset + results[-1].size


def test_a_failed_state_refuses_the_writer_and_keeps_its_first_reason(tmp_path: Path) -> None:
    state = _state(tmp_path / "store")
    writer = Writer(state)
    state.fail("an fsync", OSError(errno.EIO, "disk gone"))
    state.fail("later", OSError(errno.EIO, "again"))
    [result] = writer.append([message(1)])
    assert result.status is PutStatus.STORE_FAILED
    assert result.reason == state.failure == "an fsync failed: [Errno 5] disk gone"
    assert state.commitlog.write_position == 0


def test_forget_queues_destroys_only_the_topics_queues(tmp_path: Path) -> None:
    state = _state(tmp_path / "store")
    with state.lock:
        Writer(state).append([message(1, topic="a"), message(2, topic="b")])
    state.forget_queues("a")
    assert sorted(state.queues) == [("b", 0)]
    assert state.queue("a", 0).max_offset == 0  # a new incarnation starts empty
