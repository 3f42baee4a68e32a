"""``pocketmq group reset-offset`` and Admin.reset_offset against a real broker, with consumers
online (docs/operations.md, "Resetting a group's offsets")."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from pocketmq.cli import main
from pocketmq.client import (
    Admin,
    ConsumeStatus,
    Message,
    MessageView,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from pocketmq.client.consumer.config import PushConsumerConfig
from pocketmq.errors import GroupNotFoundError, TopicNotFoundError
from pocketmq.testing import BrokerProcess

from .conftest import create, eventually

pytestmark = pytest.mark.integration


async def _send(address: str, topic: str, count: int, prefix: str) -> list[str]:
    async with Producer(servers=address) as producer:
        return [
            (await producer.send(Message(topic=topic, body=f"{prefix}{i}".encode()))).message_id
            for i in range(count)
        ]


async def _lag(address: str, topic: str, group: str) -> int:
    async with Admin(servers=address) as admin:
        return sum(q.lag for q in await admin.queues(topic, group))


async def test_an_online_push_consumer_follows_resets_to_earliest_time_and_latest(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=2)
    got: list[bytes] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        got.extend(m.body for m in messages)
        return ConsumeStatus.SUCCESS

    # commits every 0.2 s: a stale commit after the reset would undo it if the broker took it
    config = PushConsumerConfig(offset_persist_interval=0.2)
    async with PushConsumer(group, topic, listener, servers=broker.address, config=config):
        first = await _send(broker.address, topic, 10, "a")
        await eventually(lambda: len(got) == 10)
        await eventually(lambda: _zero(broker.address, topic, group))
        split_ms = int(time.time() * 1000) + 1
        await asyncio.sleep(0.05)
        await _send(broker.address, topic, 6, "b")
        await eventually(lambda: len(got) == 16)
        await eventually(lambda: _zero(broker.address, topic, group))

        got.clear()
        async with Admin(servers=broker.address) as admin:
            moves = await admin.reset_offset(group, topic, to="earliest")
        assert sorted(m.after for m in moves) == [0, 0]
        assert sum(m.before for m in moves) == 16
        await eventually(lambda: len(got) == 16)  # everything again, without a restart
        assert sorted(got) == sorted([f"a{i}".encode() for i in range(10)] + _bs(6))
        await asyncio.sleep(0.6)  # several commit rounds: the offsets stay where consumed
        assert len(got) == 16
        assert await _lag(broker.address, topic, group) == 0

        got.clear()
        async with Admin(servers=broker.address) as admin:
            moves = await admin.reset_offset(group, topic, to="time", at_ms=split_ms)
        assert sum(m.after for m in moves) == 10  # the first message stored after the split
        await eventually(lambda: len(got) == 6)
        assert sorted(got) == sorted(_bs(6))

        async with Admin(servers=broker.address) as admin:
            await admin.reset_offset(group, topic, to="earliest")
        await eventually(lambda: len(got) == 6 + 16)
        # latest: the consumer skips a backlog it has not read yet
        got.clear()
        async with Admin(servers=broker.address) as admin:
            moves = await admin.reset_offset(group, topic, to="latest")
        assert sum(m.after for m in moves) == 16
        await asyncio.sleep(0.6)
        await _send(broker.address, topic, 2, "c")
        await eventually(lambda: b"c0" in got and b"c1" in got)
    assert len(first) == 10


def _bs(count: int) -> list[bytes]:
    return [f"b{i}".encode() for i in range(count)]


async def _zero(address: str, topic: str, group: str) -> bool:
    return await _lag(address, topic, group) == 0


async def test_a_simple_consumer_continues_from_a_reset_and_in_flight_receipts_are_forgotten(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    await _send(broker.address, topic, 5, "m")
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=0.2) as consumer:
        batch = await consumer.receive(5)
        assert len(batch) == 5
        for message in batch[:3]:
            await consumer.ack(message)
        async with Admin(servers=broker.address) as admin:
            await admin.reset_offset(group, topic, to="earliest")
        again = await consumer.receive(5)
        assert sorted(m.body for m in again) == [f"m{i}".encode() for i in range(5)]
        for message in again:
            await consumer.ack(message)
        assert await _lag(broker.address, topic, group) == 0


async def test_reset_refuses_unknown_names_and_dead_letter_topics(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    async with Admin(servers=broker.address) as admin:
        with pytest.raises(TopicNotFoundError):
            await admin.reset_offset(group, names("missing"), to="earliest")
        with pytest.raises(GroupNotFoundError):
            await admin.reset_offset(names("nobody"), topic, to="earliest")
        with pytest.raises(Exception, match="time"):
            await admin.reset_offset(group, topic, to="time", at_ms=0)


async def test_the_cli_resets_to_an_iso_time_and_prints_each_queue(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=2)
    await _send(broker.address, topic, 4, "x")
    runner = CliRunner()

    def invoke(*args: str) -> list[dict[str, int]]:
        result = runner.invoke(
            main,
            ["group", "reset-offset", group, "--topic", topic, *args, "--json",
             "--server", broker.address],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.output.splitlines()]

    rows = await asyncio.to_thread(invoke, "--to-latest")
    assert sorted(r["after"] for r in rows) == [2, 2]
    rows = await asyncio.to_thread(invoke, "--to-time", "2000-01-01T00:00:00")
    assert sorted(r["after"] for r in rows) == [0, 0]
    assert sorted(r["before"] for r in rows) == [2, 2]
    rows = await asyncio.to_thread(invoke, "--to-time", "2999-01-01T00:00:00+00:00")
    assert sorted(r["after"] for r in rows) == [2, 2]
    both = await asyncio.to_thread(
        runner.invoke,
        main,
        ["group", "reset-offset", group, "--topic", topic, "--to-latest", "--to-earliest",
         "--server", broker.address],
    )  # fmt: skip
    assert both.exit_code != 0
    assert "exactly one" in both.output
