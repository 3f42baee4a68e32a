"""Flush policy: sync mode acknowledges only after fsync, and concurrent writers share fsyncs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pocketmq.store import FlushMode, MessageStore, PutStatus, StoreConfig

from .conftest import message

SYNC = StoreConfig(
    flush_mode=FlushMode.SYNC,
    segment_size=1 << 20,
    checkpoint_interval=3600,
    min_free_disk_bytes=0,
)


def test_sync_put_returns_only_after_the_log_is_fsynced(store_dir: Path) -> None:
    with MessageStore.open(str(store_dir), SYNC) as s:
        [result] = s.put([message(1)])
        assert result.status is PutStatus.PUT_OK
        assert s.statistics().flushed_position >= result.physical_offset + result.size


def test_async_put_does_not_wait_and_the_interval_flush_catches_up(store_dir: Path) -> None:
    config = StoreConfig(flush_interval=0.05, checkpoint_interval=3600, min_free_disk_bytes=0)
    with MessageStore.open(str(store_dir), config) as s:
        [result] = s.put([message(1)])
        end = result.physical_offset + result.size
        deadline = time.monotonic() + 5
        while s.statistics().flushed_position < end and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.statistics().flushed_position >= end


def test_concurrent_sync_writers_share_fsyncs(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers, per_writer = 32, 20
    real = os.fdatasync

    def disk_like(fd: int) -> None:
        # A flush that takes as long as a real disk's (this VM's page cache answers in
        # microseconds, so whether writers met in one fsync depended on thread scheduling).
        time.sleep(0.002)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", disk_like)
    with MessageStore.open(str(store_dir), SYNC) as s:
        before = s.statistics().fsyncs
        barrier = threading.Barrier(writers)

        def write(n: int) -> None:
            barrier.wait()
            for i in range(per_writer):
                [r] = s.put([message(n * 1000 + i)])
                assert r.status is PutStatus.PUT_OK

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fsyncs = s.statistics().fsyncs - before
        assert s.max_offset("orders", 0) == writers * per_writer
        # one fsync per message would be 640; writers arriving during a flush share the next
        assert fsyncs < writers * per_writer / 4, fsyncs


def test_a_slow_fsync_answers_flush_disk_timeout_but_keeps_the_message(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StoreConfig(
        flush_mode=FlushMode.SYNC,
        sync_flush_timeout=0.05,
        checkpoint_interval=3600,
        min_free_disk_bytes=0,
    )
    real = os.fdatasync

    def slow(fd: int) -> None:
        time.sleep(0.3)
        real(fd)

    with MessageStore.open(str(store_dir), config) as s:
        monkeypatch.setattr(os, "fdatasync", slow)
        [result] = s.put([message(1)])
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert result.status.stored
        monkeypatch.setattr(os, "fdatasync", real)
        assert s.get_messages("orders", 0, 0).messages[0].message_id == "MSG000001"


def test_when_durable_calls_back_for_asyncio_style_waiters(store_dir: Path) -> None:
    with MessageStore.open(str(store_dir), SYNC) as s:
        [r] = s.append([message(1)])
        done = threading.Event()
        outcome: list[bool] = []
        s.when_durable(r.physical_offset + r.size, lambda ok: (outcome.append(ok), done.set()))
        assert done.wait(5)
        assert outcome == [True]
        # already durable: answered at once
        s.when_durable(r.physical_offset + r.size, outcome.append)
        assert outcome == [True, True]


def test_busy_store_answers_os_page_cache_busy(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StoreConfig(busy_timeout=0.05, checkpoint_interval=3600, min_free_disk_bytes=0)
    with MessageStore.open(str(store_dir), config) as s:
        s.put([message(0)])
        real = os.pwrite
        entered = threading.Event()

        def stuck(fd: int, data: bytes, offset: int) -> int:
            entered.set()
            time.sleep(0.3)
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", stuck)
        slow = threading.Thread(target=s.put, args=([message(1)],))
        slow.start()
        assert entered.wait(5)
        time.sleep(0.1)
        assert s.busy
        assert s.append([message(2)])[0].status is PutStatus.OS_PAGE_CACHE_BUSY
        slow.join()
        monkeypatch.setattr(os, "pwrite", real)
        assert not s.busy
        assert s.append([message(3)])[0].status is PutStatus.PUT_OK
