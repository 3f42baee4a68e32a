"""A damaged broker state file never stops the broker from starting (docs/storage-format.md §10).

Every file under ``<data-dir>/config/`` is tried with garbage (moved aside as
``<name>.corrupt-<time>``, one ERROR line, the broker starts with what it can recover) and with
one bad entry beside a good one (the bad entry is skipped with a log line, the good one kept,
the original copied aside). docs/storage-format.md §10 lists what each loss costs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig, ConsumeFrom, GroupConfig, InboundMessage

STATE_FILES = [
    "offsets.json",
    "pop.json",
    "schedule.json",
    "transactions.json",
    "redrive.json",
    "topics.json",
    "groups.json",
]
# none of these is a JSON document of the file's shape (an object, or an array for topics and
# groups): "shape" is the other one
GARBAGE = {
    "binary": b"\x00\xff\xfe garbage {",
    "empty": b"",
    "string": b'"a string"',
    "torn": b'{"a": [1, 2',
    "trailing": b"{}{}",
    "shape": None,
}


def _open(tmp_path: Path) -> Broker:
    return Broker(BrokerConfig(data_dir=str(tmp_path)))


def _config_dir(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.mkdir(mode=0o700, exist_ok=True)  # as the broker makes it: no warning about its mode
    return path


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("name", STATE_FILES)
async def test_a_garbage_state_file_is_set_aside_and_the_broker_starts(
    tmp_path: Path, name: str, garbage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = _config_dir(tmp_path) / name
    content = GARBAGE[garbage]
    if content is None:
        content = b"{}" if name in ("topics.json", "groups.json") else b"[]"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        broker = _open(tmp_path)
    try:
        await broker.start()
        broker.create_topic("orders", queues=1)  # and the broker serves
        broker.create_group(GroupConfig(name="g"))
        [sent] = await broker.send([InboundMessage("orders", b"x")])
        assert sent.code == 0
    finally:
        await broker.close()
    aside = list(path.parent.glob(name + ".corrupt-*"))
    assert [p.read_bytes() for p in aside] == [content]
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert name in error
    assert "moved aside" in error
    assert not any(r.exc_info for r in caplog.records)


def _pop_snapshot(next_offset: int) -> dict[str, Any]:
    return {"next_offset": next_offset, "committed": 0, "inflight": {}, "done": []}


# file -> (content with one good and one bad entry, check of what the broker kept)
BAD_ENTRIES: dict[str, tuple[Any, Callable[[Broker], None]]] = {
    "offsets.json": (
        {"g@orders@0": 5, "g@a@b@0": 7},  # a topic containing '@', as one commit once stored
        lambda b: _eq(b.offsets.query("g", "orders", 0), 5),
    ),
    "pop.json": (
        {"g@orders@0": _pop_snapshot(3), "g@orders": _pop_snapshot(4)},
        lambda b: _eq(b.pop_state.get("g", "orders", 0).next_offset, 3),  # type: ignore[union-attr]
    ),
    "schedule.json": (
        {"levels": {"1": 3, "x": 4}, "timer_floor": -1},
        lambda b: _eq((b.schedule._level_offsets, b.schedule._timer.floor), ({1: 3}, 0)),
    ),
    "transactions.json": (
        {"half_floor": "abc"},
        lambda b: _eq(b.transactions.floor, 0),
    ),
    "redrive.json": (
        {"audit_offset": 0, "groups": {"g": [1, 2, "x"]}},
        lambda b: _eq(b.redriven("g"), {1, 2}),
    ),
    "topics.json": (
        [{"name": "orders", "queues": 2}, {"name": "a@b"}, {"name": "x", "queues": 0}],
        lambda b: _eq([t.name for t in b.topics.all()], ["orders"]),
    ),
    "groups.json": (
        [{"name": "g"}, {"name": "g2", "fifo": "yes"}, {"name": "%SYS%g"}],
        lambda b: _eq([g.name for g in b.groups.all()], ["g"]),
    ),
}


def _eq(actual: object, expected: object) -> None:
    assert actual == expected


@pytest.mark.parametrize("name", STATE_FILES)
async def test_a_bad_entry_is_skipped_and_the_good_ones_kept(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    content, check = BAD_ENTRIES[name]
    path = _config_dir(tmp_path) / name
    path.write_text(json.dumps(content))
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        broker = _open(tmp_path)
    try:
        check(broker)
    finally:
        await broker.close()
    [aside] = path.parent.glob(name + ".corrupt-*")
    assert json.loads(aside.read_text()) == content  # the original, for the operator
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped, "the bad entry must be logged"
    assert all(name in line for line in skipped)


async def test_many_bad_entries_log_a_handful_of_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = {f"g@t{n}@x": n for n in range(10_000)}
    (_config_dir(tmp_path) / "offsets.json").write_text(json.dumps(bad))
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        broker = _open(tmp_path)
    await broker.close()
    assert len(caplog.records) <= 12
    assert "10000 bad entries" in caplog.records[-1].getMessage()


async def test_groups_whose_offsets_were_lost_start_from_the_oldest_message(
    tmp_path: Path,
) -> None:
    """A consume-from-last group without an offset would start at the newest message and skip
    what arrived since its last commit; after offsets.json was lost it starts at the oldest."""
    broker = _open(tmp_path)
    await broker.start()
    broker.create_topic("orders", queues=1)
    broker.create_group(GroupConfig(name="late", consume_from=ConsumeFrom.LAST))
    for n in range(3):
        await broker.send([InboundMessage("orders", b"m", {props.MESSAGE_ID: f"M{n}"})])
    assert broker.query_offset("late", "orders", 0) == 3  # as configured: the newest
    await broker.close()
    (tmp_path / "config" / "offsets.json").write_bytes(b"\x00garbage")

    broker = _open(tmp_path)
    try:
        assert broker.query_offset("late", "orders", 0) == 0
        broker.create_group(GroupConfig(name="new", consume_from=ConsumeFrom.LAST))
        assert broker.query_offset("new", "orders", 0) == 3  # groups created since: as asked
    finally:
        await broker.close()
