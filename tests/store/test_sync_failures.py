"""An fsync that fails is fatal for durability (the PostgreSQL lesson): Linux reports a writeback
error once, so a later fsync that succeeds proves nothing about the bytes the failed one covered.
The store stops acknowledging writes, says so with a distinct status, and recovers from the log on
the next start."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from pocketmq.store import FlushMode, MessageStore, PutStatus, faults
from pocketmq.store.faults import FaultRule

from .conftest import SMALL, message

SYNC = dataclasses.replace(SMALL, flush_mode=FlushMode.SYNC, checkpoint_interval=0.05)


def _wait(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def test_a_failed_log_fsync_is_never_answered_put_ok(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    with MessageStore.open(str(tmp_path / "s"), SYNC) as store:
        [first] = store.put([message(0)])
        assert first.status is PutStatus.PUT_OK
        injector.arm(FaultRule(op="fsync", target="commitlog", errno="EIO", count=1))
        [failed] = store.put([message(1)])
        assert failed.status is PutStatus.STORE_FAILED
        assert "fsync" in failed.reason
        # the next fsync would succeed (Linux reports the error once): still no acknowledgement
        [later] = store.put([message(2)])
        assert later.status is PutStatus.STORE_FAILED
        assert store.statistics().failure
        # reads go on
        assert store.get_messages("orders", 0, 0).messages[0].message_id == "MSG000000"
    faults.uninstall()
    with MessageStore.open(str(tmp_path / "s"), SYNC) as store:
        assert store.statistics().failure == ""
        [again] = store.put([message(3)])
        assert again.status is PutStatus.PUT_OK


def test_a_failed_fsync_inside_the_checkpoint_stops_writes(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    config = dataclasses.replace(SMALL, checkpoint_interval=0.05, flush_interval=0.05)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        [first] = store.put([message(0)])
        assert first.status is PutStatus.PUT_OK
        injector.arm(FaultRule(op="fsync", target="consumequeue", errno="EIO", count=1))
        store.put([message(1)])
        _wait(lambda: bool(store.statistics().failure))
        [refused] = store.put([message(2)])
        assert refused.status is PutStatus.STORE_FAILED
    # the checkpoint did not advance past the failure; the log is replayed on the next start
    faults.uninstall()
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        ids = [m.message_id for m in store.get_messages("orders", 0, 0, max_count=10).messages]
        assert ids == ["MSG000000", "MSG000001"]


def test_a_failed_checkpoint_file_fsync_stops_writes_too(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    config = dataclasses.replace(SMALL, checkpoint_interval=0.05, flush_interval=0.05)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        store.put([message(0)])
        injector.arm(FaultRule(op="fsync", target="checkpoint", errno="EIO", count=1))
        _wait(lambda: bool(store.statistics().failure))
        [refused] = store.put([message(1)])
        assert refused.status is PutStatus.STORE_FAILED


def test_a_checkpoint_that_cannot_be_written_is_retried_not_fatal(
    tmp_path: Path, injector: faults.FaultInjector
) -> None:
    config = dataclasses.replace(SMALL, checkpoint_interval=0.05, flush_interval=0.05)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        injector.arm(FaultRule(op="open", target="checkpoint", errno="ENOSPC", count=2))
        store.put([message(0)])
        _wait(lambda: injector.injected == 2)
        time.sleep(0.2)
        assert store.statistics().failure == ""
        [ok] = store.put([message(1)])
        assert ok.status is PutStatus.PUT_OK
