"""A dead letter is re-driven once, however redrives overlap or stop (docs/semantics.md,
"Consumer retry, delays and dead letters").

Two redrives of one group running at the same time used to both find every dead letter not yet
done and resend all of them (20 dead letters, 40 copies); a redrive that stopped half-way had
recorded nothing and resent everything on the next run. Progress is now recorded per message,
in the same step as its resend, and redrives of a group run one after the other.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage, SendOutcome
from pocketmq.broker.redrive import REDRIVE_AUDIT_TOPIC
from pocketmq.errors import StoreCorruptedError
from pocketmq.store import FlushMode, StoreConfig, StoreStatistics
from pocketmq.store.reader import Reader

COUNT = 20


def _config(tmp_path: Path) -> BrokerConfig:
    # sync flush: every resend waits for its fsync, so redrives really interleave
    store = StoreConfig(flush_mode=FlushMode.SYNC, min_free_disk_bytes=0)
    return BrokerConfig(data_dir=str(tmp_path), store=store)


async def _dead_letters(broker: Broker) -> list[int]:
    broker.create_topic("orders", queues=1)
    broker.create_group(GroupConfig(name="g"))
    for n in range(COUNT):
        [sent] = await broker.send(
            [InboundMessage("orders", b"m%d" % n, {props.MESSAGE_ID: f"M{n}"})]
        )
        assert await broker.send_back("g", sent.physical_offset, f"M{n}", delay_level=-1) == "dlq"
    return list(range(COUNT))


def _copies(broker: Broker) -> collections.Counter[str]:
    """How often each message id is in ``orders`` (the original plus its resends)."""
    found = broker.browse("orders", 0, 0, 1024)
    return collections.Counter(m.properties[props.MESSAGE_ID] for m in found)


async def test_two_concurrent_redrives_resend_each_dead_letter_once(tmp_path: Path) -> None:
    broker = Broker(_config(tmp_path))
    await broker.start()
    try:
        offsets = await _dead_letters(broker)
        first, second = await asyncio.gather(
            broker.redrive("g", offsets), broker.redrive("g", offsets)
        )
        statuses = sorted([r[2] for r in first], reverse=True), sorted(r[2] for r in second)
        assert statuses == (["resent"] * COUNT, ["already"] * COUNT)
        assert _copies(broker) == {f"M{n}": 2 for n in range(COUNT)}  # original + one resend
    finally:
        await broker.close()


async def test_an_interrupted_redrive_resumes_where_it_stopped(tmp_path: Path) -> None:
    broker = Broker(_config(tmp_path))
    await broker.start()
    try:
        offsets = await _dead_letters(broker)
        fifth_resend = asyncio.Event()
        waits = 0
        real_wait = broker.settle

        async def settle(outcomes: list[SendOutcome], end: int) -> list[SendOutcome]:
            nonlocal waits
            waits += 1
            if waits == 5:
                fifth_resend.set()
            return await real_wait(outcomes, end)

        broker.redrives._settle = settle
        running = asyncio.ensure_future(broker.redrive("g", offsets))
        await fifth_resend.wait()  # the fifth resend waits for its fsync: stop the redrive
        running.cancel()  # the operator's connection dropped, or the broker is stopping
        with pytest.raises(asyncio.CancelledError):
            await running
        resent_before = broker.store.max_offset("orders", 0) - COUNT
        assert resent_before == 5

        report = await broker.redrive("g", offsets)
        assert [r[2] for r in report].count("already") == resent_before
        assert [r[2] for r in report].count("resent") == COUNT - resent_before
        assert _copies(broker) == {f"M{n}": 2 for n in range(COUNT)}
    finally:
        await broker.close()


@pytest.mark.parametrize("redrive_json", ["kept", "lost", "garbage"])
async def test_progress_survives_a_restart_from_the_audit_topic(
    tmp_path: Path, redrive_json: str
) -> None:
    """What was resent is known again after a restart, even when redrive.json is older than
    the last resends (a crash) or gone: the audit records in %SYS%REDRIVE are the journal."""
    config = _config(tmp_path)
    broker = Broker(config)
    await broker.start()
    try:
        offsets = await _dead_letters(broker)
        await broker.redrive("g", offsets[:7])
    finally:
        await broker.close()
    ledger = tmp_path / "config" / "redrive.json"
    if redrive_json == "lost":
        ledger.unlink()
    elif redrive_json == "garbage":
        ledger.write_bytes(b"\x00{not json")

    broker = Broker(config)
    await broker.start()
    try:
        assert broker.redriven("g") == set(range(7))
        report = await broker.redrive("g", offsets)
        assert [r[2] for r in report] == ["already"] * 7 + ["resent"] * (COUNT - 7)
        assert _copies(broker) == {f"M{n}": 2 for n in range(COUNT)}
        assert broker.store.max_offset(REDRIVE_AUDIT_TOPIC, 0) == COUNT
    finally:
        await broker.close()


async def test_the_snapshot_claims_only_resends_the_store_has_flushed(tmp_path: Path) -> None:
    """With async flush a machine crash may take back the last resends and their audit records;
    redrive.json must not claim them, or those dead letters would never be re-driven."""
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), store=StoreConfig(min_free_disk_bytes=0)))
    await broker.start()
    ledger = tmp_path / "config" / "redrive.json"
    statistics = broker.store.statistics
    flushed = [0]  # what the (faked) flusher has made durable so far

    def faked() -> StoreStatistics:
        return dataclasses.replace(statistics(), flushed_position=flushed[0])

    broker.store.statistics = faked  # type: ignore[method-assign]
    try:
        offsets = await _dead_letters(broker)
        await broker.redrive("g", offsets[:7])
        assert broker.redriven("g") == set(range(7))  # this process knows
        snapshot = json.loads(ledger.read_text())
        assert snapshot["groups"].get("g", []) == []  # the file claims nothing unflushed
        assert snapshot["audit_offset"] == 0

        flushed[0] = broker.store.written_position()
        await broker.redrive("g", offsets[:1])  # any redrive saves the snapshot again
        snapshot = json.loads(ledger.read_text())
        assert snapshot["groups"]["g"] == list(range(7))
        assert snapshot["audit_offset"] == 7
    finally:
        await broker.close()


async def test_an_unreadable_audit_topic_does_not_stop_a_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path)
    broker = Broker(config)
    await broker.start()
    try:
        await broker.redrive("g", (await _dead_letters(broker))[:3])
    finally:
        await broker.close()
    (tmp_path / "config" / "redrive.json").unlink()  # the audit topic must be replayed
    get_messages = Reader.get_messages

    def damaged_audit(self: Reader, topic: str, *args: Any, **kwargs: Any) -> Any:
        if topic == REDRIVE_AUDIT_TOPIC:
            raise StoreCorruptedError("record fails its CRC", path="00000000000000000000", offset=0)
        return get_messages(self, topic, *args, **kwargs)

    monkeypatch.setattr(Reader, "get_messages", damaged_audit)
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        broker = Broker(config)
    try:
        assert broker.redriven("g") == set()  # forgotten: a rerun resends them (at-least-once)
        [line] = [r.getMessage() for r in caplog.records]
        assert "audit topic cannot be read" in line
    finally:
        await broker.close()
