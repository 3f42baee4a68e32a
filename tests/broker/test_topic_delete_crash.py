"""Deleting a topic is all or nothing across a crash (docs/storage-format.md §1, "Tombstones").

A delete writes a tombstone to the log, deletes the topic's queues, its committed offsets and
pop state, and its entry in topics.json. A ``kill -9`` between the tombstone and topics.json
used to leave the topic listed but emptied (2 of 8 cycles): its queues were rebuilt from the log
without it, while topics.json still had it. Here the broker "crashes" before each file-changing
step in turn — every state-file write, the tombstone, each queue's deletion — and a broker
started on what the crash left on disk (the page cache keeps every write) must show the topic
either fully there or fully gone.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage, persist
from pocketmq.errors import InvalidArgumentError, StorageFullError
from pocketmq.store import StoreConfig, faults
from pocketmq.store.consumequeue import ConsumeQueue
from pocketmq.store.faults import FaultRule
from pocketmq.store.writer import Writer

TOPIC, GROUP = "doomed", "g"
SMALL = StoreConfig(segment_size=64 * 1024, index_max_entries=64, min_free_disk_bytes=0)


class Crash(BaseException):
    """The process dies here (BaseException: nothing on the way may catch it)."""


def _crash_before_step(monkeypatch: pytest.MonkeyPatch, step: int) -> list[str]:
    """Make the ``step``-th file-changing call raise :class:`Crash` before it runs; returns the
    names of the calls made (so the caller knows when no step was left to crash at)."""
    calls: list[str] = []

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step_call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            if len(calls) - 1 == step:
                raise Crash(name)
            return real(*args, **kwargs)

        return step_call

    monkeypatch.setattr(persist, "atomic_write", wrap("state file", persist.atomic_write))
    monkeypatch.setattr(ConsumeQueue, "destroy", wrap("queue", ConsumeQueue.destroy))
    monkeypatch.setattr(Writer, "append", wrap("tombstone", Writer.append))
    return calls


async def _prepared(path: Path) -> Broker:
    broker = Broker(BrokerConfig(data_dir=str(path), store=SMALL))
    broker.create_topic(TOPIC, queues=2)
    broker.create_group(GroupConfig(name=GROUP))
    await broker.send([InboundMessage(TOPIC, b"m%d" % i, {}, queue_id=i % 2) for i in range(6)])
    broker.offsets.commit(GROUP, TOPIC, 0, 2)
    broker.offsets.persist(force=True)
    return broker


async def _check_all_or_nothing(data: Path) -> str:
    broker = Broker(BrokerConfig(data_dir=str(data), store=SMALL))
    try:
        if broker.topics.get(TOPIC) is not None:  # fully there
            assert [broker.store.max_offset(TOPIC, q) for q in (0, 1)] == [3, 3]
            pulled = await broker.pull(GROUP, TOPIC, 0, 0, max_count=10)
            assert [m.body for m in pulled.messages] == [b"m0", b"m2", b"m4"]
            assert broker.offsets.query(GROUP, TOPIC, 0) == 2
            return "there"
        # fully gone: no queue, no offset, and a topic created again starts empty at offset 0
        assert TOPIC not in broker.topics.pending_deletes()
        assert [broker.store.max_offset(TOPIC, q) for q in (0, 1)] == [0, 0]
        assert broker.offsets.query(GROUP, TOPIC, 0) < 0
        assert not [p for p in (data / "store" / "consumequeue" / TOPIC).rglob("*") if p.is_file()]
        broker.create_topic(TOPIC, queues=2)
        [sent] = await broker.send([InboundMessage(TOPIC, b"new", {}, queue_id=0)])
        assert sent.queue_offset == 0
        pulled = await broker.pull(GROUP, TOPIC, 0, 0, max_count=10)
        assert [m.body for m in pulled.messages] == [b"new"]
        return "gone"
    finally:
        await broker.close()


async def test_a_crash_at_any_step_of_a_delete_leaves_the_topic_there_or_gone(
    tmp_path: Path,
) -> None:
    outcomes: list[tuple[str, str]] = []
    step = 0
    while True:
        original = tmp_path / f"run-{step}"
        broker = await _prepared(original)
        with pytest.MonkeyPatch.context() as patch:
            calls = _crash_before_step(patch, step)
            try:
                broker.delete_topic(TOPIC)
                crashed = False
            except Crash:
                crashed = True
        copy = tmp_path / f"crashed-{step}"
        shutil.copytree(original, copy)  # what the crash left: every write is in the page cache
        await broker.close()
        outcome = await _check_all_or_nothing(copy)
        outcomes.append((calls[-1] if crashed else "done", outcome))
        if not crashed:
            break
        step += 1
    assert outcomes[0] == ("state file", "there")  # before anything: still there
    assert outcomes[-1] == ("done", "gone")
    assert {"tombstone", "queue"} <= {name for name, _ in outcomes}  # each step was crashed at


async def test_a_delete_whose_tombstone_is_refused_leaves_the_topic_as_it_was(
    tmp_path: Path,
) -> None:
    broker = await _prepared(tmp_path / "b")
    injector = faults.FaultInjector()
    faults.install(injector)
    try:
        injector.arm(FaultRule(op="write", target="commitlog", errno="ENOSPC"))
        with pytest.raises(StorageFullError, match="was not deleted"):
            broker.delete_topic(TOPIC)
    finally:
        faults.uninstall()
    assert broker.topics.get(TOPIC) is not None
    assert broker.topics.pending_deletes() == []
    assert '"deleting"' not in (tmp_path / "b" / "config" / "topics.json").read_text()
    await broker.close()
    assert await _check_all_or_nothing(tmp_path / "b") == "there"


async def test_a_delete_a_restart_cannot_finish_stays_pending_until_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = await _prepared(tmp_path / "b")
    await broker.close()
    topics = tmp_path / "b" / "config" / "topics.json"
    entries = json.loads(topics.read_text())
    for entry in entries:
        if entry["name"] == TOPIC:
            entry["deleting"] = True  # a delete began; the process died before its tombstone
    topics.write_text(json.dumps(entries))
    injector = faults.FaultInjector()
    faults.install(injector)
    try:
        injector.arm(FaultRule(op="write", target="commitlog", errno="ENOSPC", count=-1))
        broker = Broker(BrokerConfig(data_dir=str(tmp_path / "b"), store=SMALL))
    finally:
        faults.uninstall()
    try:
        assert "could not be finished" in caplog.text
        assert broker.topics.get(TOPIC) is None  # deleted for clients meanwhile
        with pytest.raises(InvalidArgumentError, match="still being deleted"):
            broker.create_topic(TOPIC, queues=2)
        broker.delete_topic(TOPIC)  # the disk has room again: the operator finishes it
        assert broker.topics.pending_deletes() == []
    finally:
        await broker.close()
    assert await _check_all_or_nothing(tmp_path / "b") == "gone"
