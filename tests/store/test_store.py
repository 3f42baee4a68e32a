"""The store's behaviour through its public API: append, read, filter, look up, statuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pocketmq.store import (
    GetStatus,
    MessageStore,
    PutStatus,
    StoreConfig,
    StoreMessage,
)

from .conftest import SMALL, message


def test_offsets_are_assigned_per_queue_and_reads_return_what_was_written(
    store: MessageStore,
) -> None:
    results = store.put([message(i, queue_id=i % 3) for i in range(30)])
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert [r.queue_offset for r in results if r.queue_id == 1] == list(range(10))
    physical = [r.physical_offset for r in results]
    assert physical == sorted(physical)
    assert len(set(physical)) == 30
    got = store.get_messages("orders", 1, 0, max_count=100)
    assert got.status is GetStatus.FOUND
    assert [m.message_id for m in got.messages] == [f"MSG{i:06d}" for i in range(1, 30, 3)]
    assert got.next_offset == 10
    assert got.max_offset == 10
    assert got.min_offset == 0
    assert got.messages[0].body.startswith(b"body-1-")


def test_records_roll_over_segments_with_blank_fill(store: MessageStore) -> None:
    results = store.put([message(i, size=3000) for i in range(20)])
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert store.statistics().segments >= 4
    for r in results:  # never spans a segment boundary
        assert (
            r.physical_offset // SMALL.segment_size
            == (r.physical_offset + r.size - 1) // SMALL.segment_size
        )
    got = store.get_messages("orders", 0, 0, max_count=100)
    assert [m.message_id for m in got.messages] == [f"MSG{i:06d}" for i in range(20)]


def test_read_statuses(store: MessageStore) -> None:
    assert store.get_messages("orders", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    store.put([message(i) for i in range(5)])
    assert store.get_messages("orders", 0, 5).status is GetStatus.OFFSET_OVERFLOW_ONE
    badly = store.get_messages("orders", 0, 9)
    assert badly.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert badly.next_offset == 5
    assert store.get_messages("nope", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE


def test_max_count_and_max_bytes(store: MessageStore) -> None:
    store.put([message(i, size=1000) for i in range(10)])
    assert len(store.get_messages("orders", 0, 0, max_count=3).messages) == 3
    limited = store.get_messages("orders", 0, 0, max_count=10, max_bytes=2500)
    assert len(limited.messages) == 2
    assert limited.next_offset == 2
    # the first message is always returned even if larger than max_bytes
    assert len(store.get_messages("orders", 0, 0, max_bytes=10).messages) == 1


def test_tag_filter_skips_non_matching_and_advances(store: MessageStore) -> None:
    store.put([message(i) for i in range(20)])
    got = store.get_messages("orders", 0, 0, max_count=100, tags=frozenset({"odd"}))
    assert [m.tag for m in got.messages] == ["odd"] * 10
    assert got.next_offset == 20
    none = store.get_messages("orders", 0, 0, tags=frozenset({"missing"}))
    assert none.status is GetStatus.NO_MATCHED_MESSAGE
    assert none.next_offset == 20


def test_sparse_filter_is_bounded_by_max_scan(store: MessageStore) -> None:
    store.put([message(i) for i in range(50)])
    got = store.get_messages("orders", 0, 0, tags=frozenset({"missing"}), max_scan=16)
    assert got.status is GetStatus.NO_MATCHED_MESSAGE
    assert got.next_offset == 16


def test_lookup_by_id_key_and_physical_offset(store: MessageStore) -> None:
    results = store.put([message(i) for i in range(100)])
    [found] = store.query_by_id("MSG000042")
    assert found.queue_offset == 42
    assert [m.message_id for m in store.query_by_key("orders", "order-7")] == ["MSG000007"]
    assert len(store.query_by_key("orders", "batch-3")) == 10
    assert store.query_by_key("other-topic", "order-7") == []
    assert store.query_by_id("missing") == []
    by_offset = store.read_message(results[64].physical_offset)
    assert by_offset is not None
    assert by_offset.message_id == "MSG000064"
    assert store.read_message(results[64].physical_offset + 1) is None


def test_index_survives_many_files(store_dir: Path) -> None:
    config = StoreConfig(index_max_entries=16, segment_size=1 << 20, min_free_disk_bytes=0)
    with MessageStore.open(str(store_dir), config) as s:
        s.put([message(i) for i in range(200)])  # 3 keys each => dozens of index files
        assert [m.queue_offset for m in s.query_by_id("MSG000003")] == [3]
        assert [m.queue_offset for m in s.query_by_id("MSG000199")] == [199]
    with MessageStore.open(str(store_dir), config) as s:
        assert [m.queue_offset for m in s.query_by_id("MSG000100")] == [100]


def test_duplicate_message_ids_are_all_found(store: MessageStore) -> None:
    store.put([message(1), message(1)])  # a producer retry stored it twice
    assert [m.queue_offset for m in store.query_by_id("MSG000001")] == [1, 0]


def test_illegal_messages_get_a_status_and_do_not_disturb_the_batch(store: MessageStore) -> None:
    results = store.put(
        [
            message(0),
            StoreMessage(topic="bad topic", queue_id=0, body=b"x"),
            StoreMessage(topic="orders", queue_id=-1, body=b"x"),
            StoreMessage(topic="orders", queue_id=0, body=b"x" * (SMALL.max_message_size + 1)),
            StoreMessage(topic="orders", queue_id=0, body=b"x" * 20_000),  # > segment
            StoreMessage(topic="orders", queue_id=0, body=b"x", properties={"p": "v" * 40_000}),
            message(1),
        ]
    )
    assert [r.status for r in results] == [
        PutStatus.PUT_OK,
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.MESSAGE_TOO_LARGE,
        PutStatus.MESSAGE_TOO_LARGE,
        PutStatus.PROPERTIES_TOO_LARGE,
        PutStatus.PUT_OK,
    ]
    assert "bad topic" in results[1].reason
    assert [r.queue_offset for r in (results[0], results[6])] == [0, 1]


def test_message_size_limit_default_is_4_mib(tmp_path: Path) -> None:
    config = StoreConfig(segment_size=8 << 20, min_free_disk_bytes=0)
    with MessageStore.open(str(tmp_path / "s"), config) as s:
        ok, too_big = s.put(
            [
                StoreMessage(topic="t", queue_id=0, body=b"x" * (4 << 20)),
                StoreMessage(topic="t", queue_id=0, body=b"x" * ((4 << 20) + 1)),
            ]
        )
        assert ok.status is PutStatus.PUT_OK
        assert too_big.status is PutStatus.MESSAGE_TOO_LARGE
        assert "4194304" in too_big.reason


def test_a_second_process_cannot_open_the_same_directory(
    store: MessageStore, store_dir: Path
) -> None:
    with pytest.raises(RuntimeError, match="in use"):
        MessageStore.open(str(store_dir), SMALL)


def test_closed_store_refuses_writes(store_dir: Path) -> None:
    s = MessageStore.open(str(store_dir), SMALL)
    s.close()
    assert s.append([message(0)])[0].status is PutStatus.SERVICE_NOT_AVAILABLE


def test_reopen_keeps_everything_and_continues_offsets(store_dir: Path) -> None:
    with MessageStore.open(str(store_dir), SMALL) as s:
        s.put([message(i, queue_id=i % 2, size=700) for i in range(60)])
    assert not (store_dir / "abort").exists()
    with MessageStore.open(str(store_dir), SMALL) as s:
        assert s.max_offset("orders", 0) == 30
        [r] = s.put([message(99, queue_id=0)])
        assert r.queue_offset == 30
        got = s.get_messages("orders", 0, 0, max_count=100)
        assert [m.message_id for m in got.messages][-2:] == ["MSG000058", "MSG000099"]


def test_schedule_queues_keep_their_own_tag_code(store_dir: Path) -> None:
    with MessageStore.open(str(store_dir), SMALL) as s:
        s.put([StoreMessage(topic="SCHEDULE", queue_id=3, body=b"x", tag_code=1_700_000_000_123)])
        assert s.read_queue("SCHEDULE", 3, 0, 1)[0].tag_code == 1_700_000_000_123
    os.unlink(store_dir / "checkpoint")  # force a rebuild of the queues from the log
    with MessageStore.open(str(store_dir), SMALL) as s:
        assert s.read_queue("SCHEDULE", 3, 0, 1)[0].tag_code == 1_700_000_000_123


def test_delete_topic_forgets_its_queues(store: MessageStore, store_dir: Path) -> None:
    store.put([message(i, queue_id=i % 2) for i in range(4)] + [message(9, topic="keep")])
    store.delete_topic("orders")
    assert not (store_dir / "consumequeue" / "orders").exists()
    assert [store.max_offset("orders", q) for q in (0, 1)] == [0, 0]
    assert store.get_messages("orders", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.max_offset("keep", 0) == 1


def test_statistics_snapshot(store: MessageStore) -> None:
    store.put([message(i) for i in range(7)])
    stats = store.statistics()
    assert stats.messages_put == 7
    assert stats.bytes_put > 7 * 100
    assert stats.queues == 1
    assert stats.flush_mode == "async"
