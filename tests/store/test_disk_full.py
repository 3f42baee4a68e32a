"""A full disk is an answer (DISK_FULL), never a crash, and the store keeps serving reads.

And the operator hears of it once (docs/operations.md, "A full disk"): one WARNING when the
free-space guard engages and one when it clears, not an ERROR line per refused send (a full
disk once logged 63 identical lines a second), and ``/readyz`` says 503 ``refusing writes:
disk`` meanwhile, with ``pocketmq_store_disk_full`` 1 on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pocketmq.store import MessageStore, PutStatus, StoreConfig, faults
from pocketmq.store.faults import FaultRule
from pocketmq.testing import BrokerProcess

from .conftest import message

CONFIG = StoreConfig(
    segment_size=64 * 1024,
    consume_queue_entries_per_file=64,
    index_max_entries=64,
    flush_interval=3600,
    checkpoint_interval=3600,
    min_free_disk_bytes=0,
)


@contextmanager
def _tmpfs(mount: Path, size: str) -> Iterator[Path]:
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
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


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    with _tmpfs(tmp_path / "tiny", "256k") as mount:
        yield mount


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str = "") -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pocketmq.store" and r.levelno == level and text in r.getMessage()
    ]


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


def test_a_full_disk_is_one_warning_not_an_error_per_send_and_clears_with_one(
    tiny_filesystem: Path, caplog: pytest.LogCaptureFixture
) -> None:
    filler = tiny_filesystem / "filler"
    filler.write_bytes(b"x" * 64 * 1024)  # what the operator deletes to make room
    statuses = []
    with (
        caplog.at_level(logging.INFO, "pocketmq.store"),
        MessageStore.open(str(tiny_filesystem / "store"), CONFIG) as store,
    ):
        for i in range(200):
            [result] = store.put([message(i, size=4000)])
            statuses.append(result.status)
        assert statuses.count(PutStatus.DISK_FULL) > 100
        assert len(_lines(caplog, logging.ERROR)) == 0
        assert len(_lines(caplog, logging.WARNING, "refuses writes")) == 1
        assert store.statistics().refusing_writes.startswith("disk: ")
        filler.unlink()
        deadline = time.monotonic() + 5
        while store.put([message(999, size=100)])[0].status is not PutStatus.PUT_OK:
            assert time.monotonic() < deadline, "writes did not resume after space was freed"
            time.sleep(0.1)
        assert store.statistics().refusing_writes == ""
    assert len(_lines(caplog, logging.WARNING, "refuses writes")) == 1
    assert len(_lines(caplog, logging.WARNING, "accepts writes again")) == 1


def test_the_watermark_guard_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = StoreConfig(min_free_disk_bytes=2**62, checkpoint_interval=3600)
    with (
        caplog.at_level(logging.INFO, "pocketmq.store"),
        MessageStore.open(str(tmp_path / "s"), config) as store,
    ):
        results = [store.put([message(i)])[0] for i in range(50)]
        assert {r.status for r in results} == {PutStatus.DISK_FULL}
        assert "MiB free, below the 4398046511104.0 MiB floor" in results[0].reason
    [warning] = _lines(caplog, logging.WARNING, "refuses writes")
    assert "min_free_disk_bytes" in warning
    assert _lines(caplog, logging.ERROR) == []


def test_the_guard_engages_and_clears_on_the_free_space_it_reads() -> None:
    from pocketmq.store.diskguard import DiskGuard

    now, free = [0.0], [10 * 2**20]
    guard = DiskGuard("/data", 64 * 2**20, clock=lambda: now[0], measure=lambda: free[0])
    assert guard.refusal().startswith("disk: 10.0 MiB free, below the 64.0 MiB floor")
    free[0] = 100 * 2**20
    assert guard.refusal() != ""  # read again at most once a second
    now[0] += 1.0
    assert guard.refusal() == ""
    # a segment of 128 MiB could not be allocated with 100 MiB free: wait for room for it
    guard.no_space(128 * 2**20, "allocating a commit-log segment", OSError(28, "No space"))
    now[0] += 1.0
    assert "below the 192.0 MiB floor" in guard.refusal()
    free[0] = 200 * 2**20
    now[0] += 1.0
    assert guard.refusal() == ""
    assert guard.engagements == 2


def test_an_enospc_the_free_space_does_not_explain_refuses_that_write_alone(
    tmp_path: Path, injector: faults.FaultInjector, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, "pocketmq.store"),
        MessageStore.open(str(tmp_path / "s"), CONFIG) as store,
    ):
        injector.arm(FaultRule(op="write", target="commitlog", errno="ENOSPC", count=20))
        results = [store.put([message(i)])[0] for i in range(21)]
        assert [r.status for r in results] == [PutStatus.DISK_FULL] * 20 + [PutStatus.PUT_OK]
    errors = _lines(caplog, logging.ERROR)  # a quota? a thin volume? said once, not 20 times
    assert len(errors) == 1
    assert "although" in errors[0]
    assert _lines(caplog, logging.WARNING, "refuses writes") == []


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def _until(check: Callable[[], tuple[int, str]], status: int, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while True:
        got, text = await asyncio.to_thread(check)
        if got == status:
            return text
        assert time.monotonic() < deadline, (got, text)
        await asyncio.sleep(0.1)


async def test_readyz_and_metrics_say_refusing_writes_while_the_disk_is_full(
    tmp_path: Path,
) -> None:
    config = {
        "store": {
            "segment_size": 64 * 1024,
            "index_max_entries": 64,
            "min_free_disk_bytes": 1024 * 1024,
        }
    }
    with _tmpfs(tmp_path / "disk", "4m") as disk:
        broker = BrokerProcess(disk / "b", config=config, grpc_port=None, http_port=0)
        try:
            readyz = f"http://{broker.http}/readyz"
            assert _get(readyz) == (200, "ready: master\n")
            filler = disk / "filler"
            stats = os.statvfs(disk)
            filler.write_bytes(b"x" * (stats.f_bavail * stats.f_frsize - 512 * 1024))
            text = await _until(lambda: _get(readyz), 503)
            assert text.startswith("refusing writes: disk: ")
            _, metrics = _get(f"http://{broker.http}/metrics")
            assert "pocketmq_store_disk_full 1.0" in metrics
            filler.unlink()
            assert await _until(lambda: _get(readyz), 200) == "ready: master\n"
            _, metrics = _get(f"http://{broker.http}/metrics")
            assert "pocketmq_store_disk_full 0.0" in metrics
        finally:
            broker.stop()
        log = broker.log()
        assert log.count("the store refuses writes") == 1, log
        assert log.count("the store accepts writes again") == 1, log
