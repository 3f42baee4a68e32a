"""Topic and group names are checked on every path that can store them (docs/semantics.md,
"Topics, groups, offsets"): a group whose %RETRY%/%DLQ% topic would not fit the store, and a
topic containing '@', are refused with InvalidArgumentError by the broker core (native and gRPC
both call it); the SDK refuses them before anything is sent (tests/client/test_names.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pocketmq.broker import Broker, BrokerConfig, GroupConfig
from pocketmq.broker.topics import dlq_topic, retry_topic
from pocketmq.errors import InvalidArgumentError
from pocketmq.names import MAX_GROUP_LENGTH, is_storable_topic

LONGEST = "g" * MAX_GROUP_LENGTH


@pytest.fixture
async def broker(tmp_path: Path) -> Broker:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), auto_create_groups=True))
    await broker.start()
    yield broker  # type: ignore[misc]
    await broker.close()


@pytest.mark.parametrize("length", range(MAX_GROUP_LENGTH + 1, 128))
async def test_a_group_whose_derived_topics_would_not_fit_is_refused(
    broker: Broker, length: int
) -> None:
    name = "g" * length
    with pytest.raises(InvalidArgumentError, match="retry and dead-letter topics"):
        broker.create_group(GroupConfig(name=name))
    with pytest.raises(InvalidArgumentError):  # gRPC settings / receive auto-create the group
        broker.require_group(name)
    with pytest.raises(InvalidArgumentError):  # native heartbeats auto-create it too
        broker.heartbeat("client-1", [(name, "CLUSTERING", {"t": "*"})])
    assert broker.groups.get(name) is None
    assert broker.topics.get(retry_topic(name)) is None


async def test_the_longest_group_name_has_storable_retry_and_dead_letter_topics(
    broker: Broker,
) -> None:
    broker.create_group(GroupConfig(name=LONGEST))
    assert is_storable_topic(retry_topic(LONGEST))
    assert is_storable_topic(dlq_topic(LONGEST))
    assert broker.topics.get(retry_topic(LONGEST)) is not None


@pytest.mark.parametrize("topic", ["a@b", "x" * 128, "", "t s"])
async def test_an_offset_commit_for_an_unstorable_topic_is_refused(
    broker: Broker, topic: str
) -> None:
    broker.create_group(GroupConfig(name="g"))
    with pytest.raises(InvalidArgumentError, match="topic name"):
        broker.commit_offsets("g", [(topic, 0, 5)])
    assert broker.offsets.query("g", topic, 0) == -1


@pytest.mark.parametrize(("queue_id", "offset"), [(-1, 0), (0, -2), (1 << 40, 0)])
async def test_an_offset_commit_with_an_impossible_position_is_refused(
    broker: Broker, queue_id: int, offset: int
) -> None:
    broker.create_group(GroupConfig(name="g"))
    with pytest.raises(InvalidArgumentError):
        broker.commit_offsets("g", [("orders", queue_id, offset)])


async def test_a_group_too_long_for_its_retry_topic_in_groups_json_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    long_name = "g" * 125
    (config / "groups.json").write_text(json.dumps([{"name": "ok"}, {"name": long_name}]))
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    try:
        assert [g.name for g in broker.groups.all()] == ["ok"]
        assert sum(long_name[:20] in r.getMessage() for r in caplog.records) == 1
    finally:
        await broker.close()
