"""A full disk is an answer (DISK_FULL), never a crash, and the store keeps serving reads."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.store import MessageStore, PutStatus, StoreConfig, faults
from pocketmq.store.faults import FaultRule

from .conftest import message

CONFIG = StoreConfig(
    segment_size=64 * 1024,
    consume_queue_entries_per_file=64,
    index_max_entries=64,
    flush_interval=3600,
    checkpoint_interval=3600,
    min_free_disk_bytes=0,
)


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}"
        if os.environ.get("CI"):  # CI runs as root: a failed mount there is a real problem
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_really_full_disk_answers_disk_full_and_keeps_serving(tiny_filesystem: Path) -> None:
    with MessageStore.open(str(tiny_filesystem / "store"), CONFIG) as store:
        statuses = []
        for i in range(60):
            [result] = store.put([message(i, size=4000)])
            statuses.append(result.status)
        assert PutStatus.PUT_OK in statuses
        assert PutStatus.DISK_FULL in statuses
        stored = statuses.count(PutStatus.PUT_OK)
        got = store.get_messages("orders", 0, 0, max_count=100)
        assert len(got.messages) == stored
        assert store.statistics().put_failures > 0
    with MessageStore.open(str(tiny_filesystem / "store"), CONFIG) as store:
        assert store.max_offset("orders", 0) == stored


def test_segment_allocation_failure_is_disk_full(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    with MessageStore.open(str(tmp_path / "s"), CONFIG) as store:
        store.put([message(0)])
        rule = FaultRule(op="allocate", target="commitlog", errno="ENOSPC", count=-1)
        injector.arm(rule)
        results = store.put([message(i, size=9000) for i in range(1, 12)])
        assert results[0].status is PutStatus.PUT_OK
        assert results[-1].status is PutStatus.DISK_FULL
        assert "No space" in results[-1].reason
        rule.count = 0
        stored = sum(r.status is PutStatus.PUT_OK for r in results) + 1
        assert store.max_offset("orders", 0) == stored
        # space is back: writes resume with the next offsets
        [again] = store.put([message(50)])
        assert again.status in (PutStatus.PUT_OK, PutStatus.DISK_FULL)


def test_free_space_watermark_refuses_writes(tmp_path: Path) -> None:
    config = StoreConfig(min_free_disk_bytes=2**62, checkpoint_interval=3600)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        [result] = store.put([message(0)])
        assert result.status is PutStatus.DISK_FULL
        assert store.max_offset("orders", 0) == 0


def test_a_failed_write_fails_only_its_messages_and_reuses_their_offsets(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    with MessageStore.open(str(tmp_path / "s"), CONFIG) as store:
        store.put([message(0)])
        injector.arm(FaultRule(op="write", target="commitlog", errno="ENOSPC"))
        results = store.put([message(1), message(2)])
        assert [r.status for r in results] == [PutStatus.DISK_FULL, PutStatus.DISK_FULL]
        [again] = store.put([message(3)])
        assert again.status is PutStatus.PUT_OK
        assert again.queue_offset == 1
        got = store.get_messages("orders", 0, 0, max_count=10)
        assert [m.message_id for m in got.messages] == ["MSG000000", "MSG000003"]
