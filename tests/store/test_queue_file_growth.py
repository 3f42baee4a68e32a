"""Consume-queue files take the disk their entries need, not their full size up front
(docs/storage-format.md §2, docs/operations.md "Disk use").

Each queue file used to be reserved in full when created (300,000 entries = 6 MB): one message
to each queue of a 128-queue topic took 867 MiB, a 1,024-queue topic ~6 GB. Files now grow in
reserved steps (4 KiB doubling to 1 MiB), and a full disk still refuses a message before it is
in the log, also when the failing reservation is a later step of the file's growth.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pocketmq.broker import Broker, BrokerConfig
from pocketmq.errors import InvalidArgumentError
from pocketmq.store import MessageStore, PutStatus, StoreConfig, StoreMessage, faults
from pocketmq.store.faults import FaultRule

GROW_MIN = 4096  # consumequeue.GROW_MIN: the first reservation of a queue file


def _on_disk(directory: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


def _one(topic: str, queue_id: int, i: int = 0) -> StoreMessage:
    return StoreMessage(topic=topic, queue_id=queue_id, body=b"x", properties={"UNIQ_KEY": f"M{i}"})


def test_one_message_per_queue_takes_a_block_per_queue_not_a_whole_file(tmp_path: Path) -> None:
    config = StoreConfig(min_free_disk_bytes=0)  # the production file size: 300,000 entries
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        results = store.put([_one("wide", q, q) for q in range(128)])
        assert all(r.status is PutStatus.PUT_OK for r in results)
        store.flush()
    queues = _on_disk(tmp_path / "s" / "consumequeue")
    assert queues <= 128 * 2 * GROW_MIN  # was 128 x 6,000,640 bytes = 732 MiB
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        assert [store.max_offset("wide", q) for q in (0, 127)] == [1, 1]
        [again] = store.put([_one("wide", 5, 200)])
        assert again.queue_offset == 1


def test_a_queue_grows_across_steps_and_files_within_one_batch(tmp_path: Path) -> None:
    # 1,000 entries per file (20,000 bytes): reservations of 4096, 8192, 16384 and 20000 bytes
    config = StoreConfig(min_free_disk_bytes=0, consume_queue_entries_per_file=1000)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        for start in range(0, 2500, 700):  # batches that cross steps and file boundaries
            batch = [_one("deep", 0, i) for i in range(start, min(start + 700, 2500))]
            assert all(r.status is PutStatus.PUT_OK for r in store.put(batch))
        got = store.get_messages("deep", 0, 0, max_count=3000)
        assert [m.queue_offset for m in got.messages][:3] == [0, 1, 2]
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        assert store.max_offset("deep", 0) == 2500
        ids = []
        offset = 0
        while offset < 2500:
            got = store.get_messages("deep", 0, offset, max_count=500)
            ids += [m.message_id for m in got.messages]
            offset = got.next_offset
        assert ids == [f"M{i}" for i in range(2500)]
    files = sorted((tmp_path / "s" / "consumequeue" / "deep" / "0").iterdir())
    assert [os.path.getsize(f) for f in files] == [20000, 20000, 16384]


def test_a_full_disk_at_a_later_growth_step_refuses_the_message_before_it_is_logged(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    config = StoreConfig(min_free_disk_bytes=0, consume_queue_entries_per_file=1000)
    per_step = GROW_MIN // 20  # entries in the first 4 KiB
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        results = store.put([_one("deep", 0, i) for i in range(per_step)])
        assert all(r.status is PutStatus.PUT_OK for r in results)
        written = store.statistics().write_position
        injector.arm(FaultRule(op="allocate", target="consumequeue", errno="ENOSPC"))
        [refused] = store.put([_one("deep", 0, per_step)])
        assert refused.status is PutStatus.DISK_FULL
        assert store.statistics().write_position == written  # nothing of it in the log
        [stored] = store.put([_one("deep", 0, per_step + 1)])  # room again
        assert stored.status is PutStatus.PUT_OK
        assert stored.queue_offset == per_step


async def test_a_topic_has_at_most_1024_queues_with_a_clear_error(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    try:
        broker.create_topic("wide", queues=1024)
        with pytest.raises(InvalidArgumentError, match="1 to 1024 queues"):
            broker.create_topic("wider", queues=1025)
        assert broker.topics.get("wider") is None
    finally:
        await broker.close()
    with pytest.raises(ValueError, match="at most 1024"):
        BrokerConfig(data_dir=str(tmp_path), default_queues=2000)
