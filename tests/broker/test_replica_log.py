"""Where a slave's copy goes on: the master's answer to a slave's handshake, and the slave
taking it (docs/replication.md §1, §2, §4)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pocketmq.broker.ha.replica_log import FollowPlan, ReplicaLog, ReplicaRefused
from pocketmq.store import MessageStore, RecoveryMode

from ..store.conftest import SMALL, message

REPAIR = dataclasses.replace(SMALL, recovery=RecoveryMode.QUARANTINE)  # `pocketmq store repair`


def copy_all(master: ReplicaLog, slave: ReplicaLog) -> None:
    while data := master.read(slave.end, 4096):
        slave.append(slave.end, data)


def test_an_empty_slave_copies_from_the_start_and_takes_the_cluster(tmp_path: Path) -> None:
    with (
        MessageStore.open(str(tmp_path / "m"), SMALL) as m,
        MessageStore.open(str(tmp_path / "s"), SMALL) as s,
    ):
        m.epochs.begin(1, 0)
        master, slave = ReplicaLog(m, "g1"), ReplicaLog(s, "g1")
        master.ensure_identity()
        m.put([message(i) for i in range(20)])
        plan = master.plan("g1", "", [], 0)
        assert (plan.truncate_to, plan.start) == (-1, 0)
        slave.follow(plan)
        assert slave.cluster_id() == master.cluster_id() != ""
        assert slave.epochs() == [(1, 0)]
        copy_all(master, slave)
        assert slave.end == master.end


def test_the_master_refuses_another_group_another_cluster_and_no_shared_history(
    tmp_path: Path,
) -> None:
    with MessageStore.open(str(tmp_path / "m"), SMALL) as m:
        m.epochs.begin(1, 0)
        m.put([message(i) for i in range(5)])
        master = ReplicaLog(m, "g1")
        master.ensure_identity()
        with pytest.raises(ReplicaRefused, match="group"):
            master.plan("g2", "", [], 0)
        with pytest.raises(ReplicaRefused, match="another cluster"):
            master.plan("g1", "someone-else", [(1, 0)], 10)
        with pytest.raises(ReplicaRefused, match="no history"):
            master.plan("g1", master.cluster_id(), [(7, 0)], 10)


def test_a_slave_with_a_divergent_suffix_is_told_to_cut_it(tmp_path: Path) -> None:
    with (
        MessageStore.open(str(tmp_path / "m"), SMALL) as m,
        MessageStore.open(str(tmp_path / "s"), SMALL) as s,
    ):
        m.epochs.begin(1, 0)
        master, slave = ReplicaLog(m, "g1"), ReplicaLog(s, "g1")
        master.ensure_identity()
        m.put([message(i) for i in range(10)])
        slave.follow(master.plan("g1", "", [], 0))
        copy_all(master, slave)
        shared = master.end
        # the master moves to a new term; the slave (an old master) wrote on in epoch 1
        s.put([message(100 + i) for i in range(5)])
        m.epochs.begin(2, shared)
        m.put([message(200 + i) for i in range(3)])
        plan = master.plan("g1", slave.cluster_id(), slave.epochs(), slave.end)
        assert (plan.truncate_to, plan.start) == (shared, shared)
        slave.follow(plan)
        assert slave.end == shared
        assert slave.epochs() == [(1, 0), (2, shared)]
        copy_all(master, slave)
        assert slave.end == master.end
        assert s.read_log(0, 1 << 20) == m.read_log(0, 1 << 20)


def test_a_slave_refuses_a_master_of_another_cluster(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as s:
        slave = ReplicaLog(s, "g1")
        slave.follow(FollowPlan("cluster-a", [], -1, 0))
        with pytest.raises(ReplicaRefused, match="another cluster"):
            slave.follow(FollowPlan("cluster-b", [], -1, 0))


def test_an_empty_slave_follows_a_master_promoted_on_an_empty_log(tmp_path: Path) -> None:
    """A group that never wrote a record fails over: the new master's terms begin afresh at
    0 (epoch 2 only), the other slave heard of epoch 1 — it has nothing, so it copies from the
    start instead of being refused for sharing no history."""
    with MessageStore.open(str(tmp_path / "m"), SMALL) as m:
        m.epochs.begin(2, 0)
        master = ReplicaLog(m, "g1")
        master.ensure_identity()
        plan = master.plan("g1", master.cluster_id(), [(1, 0)], 0)
        assert (plan.truncate_to, plan.start) == (-1, 0)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_repaired_slave_copies_again_from_its_first_damaged_record(tmp_path: Path) -> None:
    """Issue 29 item 1: a byte flipped in a slave's log, set aside by a repair, leaves a hole.
    The slave says so (what it lacks, which messages), starts its copy at the hole — cutting
    the intact records after it too, a replica never has holes — and lacks nothing once it has
    copied up to where its log ended; the range it cut is no longer stepped over by reads."""
    with MessageStore.open(str(tmp_path / "m"), SMALL) as m:
        m.epochs.begin(1, 0)
        master = ReplicaLog(m, "g1")
        master.ensure_identity()
        offsets = [r.physical_offset for r in m.put([message(i) for i in range(50)])]
        with MessageStore.open(str(tmp_path / "s"), SMALL) as s:
            slave = ReplicaLog(s, "g1")
            slave.follow(master.plan("g1", "", [], 0))
            copy_all(master, slave)
            end = slave.end
        segment = offsets[20] // SMALL.segment_size * SMALL.segment_size
        _flip(tmp_path / "s" / "commitlog" / f"{segment:020d}", offsets[20] - segment + 40)
        with MessageStore.open(str(tmp_path / "s"), REPAIR) as s:
            slave = ReplicaLog(s, "g1")
            missing = slave.missing()
            assert missing is not None
            assert (missing.start, missing.until) == (offsets[20], end)
            assert [(e.topic, e.queue_offset) for e in missing.lost] == [("orders", 20)]
            assert "1 queued message(s)" in missing.describe()
            plan = master.plan("g1", slave.cluster_id(), [(1, 0)], missing.start)
            assert (plan.truncate_to, plan.start) == (-1, offsets[20])
            slave.follow(plan)
            assert slave.end == offsets[20]
            still = slave.missing()
            assert still is not None
            assert (still.start, still.until) == (offsets[20], end)
            copy_all(master, slave)
            assert slave.missing() is None
            assert s.read_log(0, 1 << 20) == m.read_log(0, 1 << 20)
            got = s.get_messages("orders", 0, 0, max_count=100).messages
            assert [g.message_id for g in got] == [f"MSG{i:06d}" for i in range(50)]
        with MessageStore.open(str(tmp_path / "s"), SMALL) as s:  # and after a restart
            assert ReplicaLog(s, "g1").missing() is None
            assert not (tmp_path / "s" / "refetch").exists()
