"""Retention deletes whole segments by age or size, and reads move past what was deleted."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pocketmq.store import GetStatus, MessageStore, StoreConfig

from .conftest import message


def _config(**overrides: object) -> StoreConfig:
    values: dict[str, object] = {
        "segment_size": 16 * 1024,
        "consume_queue_entries_per_file": 8,
        "index_max_entries": 32,
        "flush_interval": 3600,
        "checkpoint_interval": 3600,
        "min_free_disk_bytes": 0,
    }
    values.update(overrides)
    return StoreConfig(**values)  # type: ignore[arg-type]


def _fill(store: MessageStore, count: int) -> None:
    store.put([message(i, size=2000) for i in range(count)])
    store.flush()


def test_segments_older_than_retention_are_deleted(tmp_path: Path) -> None:
    now = time.time()
    with MessageStore.open(str(tmp_path / "s"), _config(retention_hours=72)) as store:
        _fill(store, 40)  # ~5 segments
        segments = sorted((tmp_path / "s" / "commitlog").iterdir())
        assert len(segments) >= 5
        old = now - 73 * 3600
        for path in segments[:3]:
            os.utime(path, (old, old))
        report = store.run_maintenance(now)
        assert report.segments_deleted == 3
        assert not segments[0].exists()
        assert segments[3].exists()
        low = store.min_offset("orders", 0)
        assert low > 0
        assert store.get_messages("orders", 0, 0).status is GetStatus.OFFSET_TOO_SMALL
        got = store.get_messages("orders", 0, low, max_count=100)
        assert got.messages[0].queue_offset == low
        assert got.messages[-1].message_id == "MSG000039"
        assert store.query_by_id("MSG000000") == []
        assert store.query_by_id("MSG000039")
        # nothing young is deleted
        assert store.run_maintenance(now).segments_deleted == 0


def test_the_active_segment_is_never_deleted(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), _config(retention_hours=0)) as store:
        _fill(store, 20)
        store.run_maintenance(time.time() + 10)
        assert len(list((tmp_path / "s" / "commitlog").iterdir())) == 1
        assert store.get_messages("orders", 0, store.min_offset("orders", 0)).messages


def test_size_cap_deletes_oldest_first(tmp_path: Path) -> None:
    config = _config(max_store_bytes=3 * 16 * 1024)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        _fill(store, 60)
        store.run_maintenance()
        assert len(list((tmp_path / "s" / "commitlog").iterdir())) == 3
        assert store.statistics().min_physical_offset > 0


def test_retention_survives_reopen(tmp_path: Path) -> None:
    now = time.time()
    with MessageStore.open(str(tmp_path / "s"), _config()) as store:
        _fill(store, 40)
        for path in sorted((tmp_path / "s" / "commitlog").iterdir())[:2]:
            os.utime(path, (now - 100 * 3600, now - 100 * 3600))
        store.run_maintenance(now)
        low = store.min_offset("orders", 0)
    with MessageStore.open(str(tmp_path / "s"), _config()) as store:
        assert store.min_offset("orders", 0) == low
        assert store.get_messages("orders", 0, low).status is GetStatus.FOUND
