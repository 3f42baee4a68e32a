"""The store's side of replication: a slave's log is a verified byte-for-byte copy of its
master's, a damaged chunk is refused whole, a divergent suffix is cut (and kept aside), and a
replicated master shows readers only what is confirmed (docs/replication.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.store import GetStatus, MessageStore, faults
from pocketmq.store.epochs import Epoch, EpochLog, consistent_point
from pocketmq.store.faults import FaultRule
from pocketmq.store.replica import ReplicaError

from .conftest import SMALL, message


def _copy(master: MessageStore, slave: MessageStore, max_bytes: int = 4096) -> int:
    """Stream the master's log into the slave, chunk by chunk; returns the chunks sent."""
    chunks = 0
    position = slave.statistics().write_position
    while True:
        data = master.read_log(position, max_bytes)
        if not data:
            return chunks
        position = slave.append_replica(position, data)
        chunks += 1


def _ids(store: MessageStore, topic: str = "orders", queue_id: int = 0) -> list[str]:
    got = store.get_messages(topic, queue_id, 0, max_count=1000)
    return [m.message_id for m in got.messages]


def test_a_slave_log_is_a_verified_byte_for_byte_copy(tmp_path: Path) -> None:
    with (
        MessageStore.open(str(tmp_path / "m"), SMALL) as master,
        MessageStore.open(str(tmp_path / "s"), SMALL) as slave,
    ):
        master.put([message(i, queue_id=i % 3, size=400) for i in range(150)])
        master.put([message(500, size=9000)])  # a record larger than a chunk
        chunks = _copy(master, slave, max_bytes=2000)
        assert chunks > 10
        assert slave.statistics().write_position == master.statistics().write_position
        assert master.statistics().segments > 3
        for queue_id in range(3):
            assert _ids(slave, queue_id=queue_id) == _ids(master, queue_id=queue_id)
            assert slave.max_offset("orders", queue_id) == master.max_offset("orders", queue_id)
        [found] = slave.query_by_id("MSG000123")
        assert found.queue_offset == 41
        assert len(slave.query_by_key("orders", "batch-3")) == 10
        master.flush()
        slave.flush()
    for name in sorted((tmp_path / "m" / "commitlog").iterdir()):
        assert (tmp_path / "s" / "commitlog" / name.name).read_bytes() == name.read_bytes()
    with MessageStore.open(str(tmp_path / "s"), SMALL) as slave:  # and it recovers as a store
        assert len(_ids(slave)) == 51


def test_a_damaged_chunk_is_refused_whole_and_the_stream_resumes(tmp_path: Path) -> None:
    with (
        MessageStore.open(str(tmp_path / "m"), SMALL) as master,
        MessageStore.open(str(tmp_path / "s"), SMALL) as slave,
    ):
        master.put([message(i) for i in range(20)])
        data = bytearray(master.read_log(0, 3000))
        data[len(data) // 2] ^= 0xFF
        with pytest.raises(ReplicaError, match="fails verification"):
            slave.append_replica(0, bytes(data))
        assert slave.statistics().write_position == 0  # nothing of it was stored
        assert _ids(slave) == []
        with pytest.raises(ReplicaError, match="log ends at 0"):
            slave.append_replica(100, master.read_log(0, 3000))
        _copy(master, slave)
        assert _ids(slave) == _ids(master)


def test_tombstones_replicate(tmp_path: Path) -> None:
    with (
        MessageStore.open(str(tmp_path / "m"), SMALL) as master,
        MessageStore.open(str(tmp_path / "s"), SMALL) as slave,
    ):
        master.put([message(i) for i in range(4)])
        master.delete_topic("orders")
        master.put([message(9)])
        _copy(master, slave)
        assert _ids(slave) == ["MSG000009"]


def test_a_divergent_suffix_is_cut_and_the_masters_records_take_its_offsets(
    tmp_path: Path,
) -> None:
    with (
        MessageStore.open(str(tmp_path / "new"), SMALL) as new_master,
        MessageStore.open(str(tmp_path / "old"), SMALL) as old_master,
    ):
        new_master.put([message(i) for i in range(5)])
        _copy(new_master, old_master)
        old_master.put([message(100 + i) for i in range(3)])  # never replicated
        new_master.put([message(200 + i) for i in range(2)])  # the new term's messages
        point = old_master.read_queue("orders", 0, 5, 1)[0].physical_offset
        aside = old_master.cut_replica(point, "term 1 ended")
        assert aside is not None
        assert aside.kind == "divergent"
        assert [e.queue_offset for e in aside.lost] == [5, 6, 7]
        assert (tmp_path / "old" / "quarantine" / aside.saved).stat().st_size > 0
        assert old_master.max_offset("orders", 0) == 5
        _copy(new_master, old_master)
        assert _ids(old_master) == [*(f"MSG{i:06d}" for i in range(5)), "MSG000200", "MSG000201"]


def test_readers_see_only_what_is_confirmed(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "m"), SMALL) as store:
        results = store.put([message(i) for i in range(4)])
        store.set_visible_limit(results[1].physical_offset + results[1].size)
        got = store.get_messages("orders", 0, 0, max_count=10)
        assert [m.message_id for m in got.messages] == ["MSG000000", "MSG000001"]
        assert got.next_offset == 2
        waiting = store.get_messages("orders", 0, 2)
        assert (waiting.status, waiting.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 2)
        store.set_visible_limit(None)
        assert len(store.get_messages("orders", 0, 2).messages) == 2


def test_epochs_and_the_consistent_point(tmp_path: Path) -> None:
    epochs = EpochLog(str(tmp_path))
    epochs.begin(1, 0)
    epochs.begin(2, 500)
    assert EpochLog(str(tmp_path)).entries == [Epoch(1, 0), Epoch(2, 500)]
    with pytest.raises(ValueError, match="cannot follow"):
        epochs.begin(2, 900)
    # the old master wrote to 800 in epoch 2; the new master began epoch 3 at 600
    old = [Epoch(1, 0), Epoch(2, 500)]
    new = [Epoch(1, 0), Epoch(2, 500), Epoch(3, 600)]
    assert consistent_point(old, 800, new, 900) == 600
    assert consistent_point(old, 550, new, 900) == 550  # the slave is simply behind
    assert consistent_point([Epoch(1, 0)], 300, [Epoch(1, 0)], 200) == 200
    assert consistent_point([Epoch(4, 0)], 300, [Epoch(1, 0)], 200) == -1
    epochs.truncate(500)
    assert epochs.entries == [Epoch(1, 0)]


def test_a_chunk_is_reported_written_before_it_is_dispatched(tmp_path: Path) -> None:
    """A slave acknowledges what is in its log (docs/replication.md §2, step 4): the callback
    sees the new log end while the queues do not have the records yet; they are dispatched
    right after, also when the callback fails."""
    seen: list[tuple[int, int, int]] = []
    with (
        MessageStore.open(str(tmp_path / "m"), SMALL) as master,
        MessageStore.open(str(tmp_path / "s"), SMALL) as slave,
    ):
        master.put([message(i, size=100) for i in range(20)])  # one segment
        first = master.read_log(0, 1500)
        rest = master.read_log(len(first), 1 << 20)
        assert len(first) + len(rest) == master.statistics().write_position

        def written(end: int) -> None:
            seen.append((end, slave.statistics().write_position, slave.max_offset("orders", 0)))

        end = slave.append_replica(0, first, written)
        assert seen == [(end, end, 0)]  # in the log, not yet in the queue
        held = slave.max_offset("orders", 0)
        assert held > 0  # dispatched once the callback returned

        def failing(end: int) -> None:
            raise ConnectionResetError("the acknowledgement could not be sent")

        with pytest.raises(ConnectionResetError):
            slave.append_replica(end, rest, failing)
        assert _ids(slave) == _ids(master)  # dispatched all the same


def test_a_replica_that_cannot_dispatch_stops_and_recovers_its_queues_on_restart(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    """Records a slave wrote but could not put in its consume queues (a write error) are not
    left behind: the store refuses further chunks until it restarts, and recovery dispatches
    them from the log (before, the slave went on with holes in its queues for good). The
    error comes from the files layer's fault injector, the seam every queue write passes
    whichever module calls it (a class patch of ``ConsumeQueue.put`` would not be seen by a
    compiled caller: docs/benchmarks.md, "Compiled store append path")."""
    with MessageStore.open(str(tmp_path / "m"), SMALL) as master:
        master.put([message(i, size=100) for i in range(20)])
        first = master.read_log(0, 1500)
        rest = master.read_log(len(first), 1 << 20)
        expected = _ids(master)
    slave = MessageStore.open(str(tmp_path / "s"), SMALL)
    try:
        end = slave.append_replica(0, first)
        failing = FaultRule(op="write", target="consumequeue", errno="EIO", count=-1)
        injector.arm(failing)
        with pytest.raises(ReplicaError, match="accepts no writes"):
            slave.append_replica(end, rest)
        assert injector.injected
        failing.count = 0  # the disk is back: the restart below dispatches what was lost
        assert slave.failure
        with pytest.raises(ReplicaError):  # nothing more until a restart
            slave.append_replica(slave.statistics().write_position, b"")
    finally:
        slave.close()
    with MessageStore.open(str(tmp_path / "s"), SMALL) as slave:
        assert _ids(slave) == expected
