"""A push consumer holds at most ``max_cached_bytes_per_queue`` bytes of bodies per queue plus
one pull's (RocketMQ's pullThresholdSizeForQueue: the pull that crosses the bound is kept, the
next one waits), goes on when its listener catches up, and counts nothing once everything is
finished — concurrent, orderly, or after the queue moved to another consumer
(docs/semantics.md, the push consumer's limits). Against a real broker process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer, PushConsumerConfig
from pocketmq.errors import InvalidArgumentError
from pocketmq.testing import BrokerProcess

from ...integration.conftest import FAST_BROKER, create, eventually, unique
from ...scratch import scratch_broker

pytestmark = pytest.mark.integration

BODY = 16 * 1024
BOUND = 64 * 1024
PULL = 8  # messages per pull: one pull (128 KiB) crosses the bound
MOST = BOUND + PULL * BODY  # what a queue may hold: the bound plus the pull that crossed it


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_broker(tmp_path_factory, "broker", config=FAST_BROKER, grpc_port=None) as process:
        yield process


def _config(**options: Any) -> PushConsumerConfig:
    return PushConsumerConfig(
        max_cached_bytes_per_queue=BOUND, pull_batch=PULL, rebalance_interval=1.0, **options
    )


async def _send(address: str, topic: str, count: int, groups: int = 0) -> None:
    async with Producer(servers=address) as producer:
        for n in range(count):
            group = f"g{n % groups}" if groups else None
            await producer.send(
                Message(topic=topic, body=b"%08d" % n * (BODY // 8), message_group=group)
            )


def _held(consumer: PushConsumer, topic: str) -> list[int]:
    """The bytes each owned queue of ``topic`` holds now (not its group's retry topic's)."""
    return [pq.held_bytes for key, pq in consumer._state.queues.items() if key[1] == topic]


async def _watch(consumer: PushConsumer, topic: str, seconds: float) -> int:
    """The most bytes any queue held, sampled while the listener is blocked."""
    most = 0
    for _ in range(int(seconds / 0.02)):
        most = max(most, *_held(consumer, topic), 0)
        await asyncio.sleep(0.02)
    return most


def test_the_config_refuses_a_bound_that_is_not_positive() -> None:
    for bad in (0, -1):
        with pytest.raises(InvalidArgumentError, match="max_cached_bytes_per_queue"):
            PushConsumer("g", "t", lambda m: ConsumeStatus.SUCCESS, servers="127.0.0.1:9",
                         config=PushConsumerConfig(max_cached_bytes_per_queue=bad))  # fmt: skip
    assert PushConsumerConfig().max_cached_bytes_per_queue == 100 * 1024 * 1024


async def test_a_blocked_listener_holds_the_bound_plus_one_pull_then_everything_is_consumed(
    broker: BrokerProcess,
) -> None:
    topic, group = unique("t"), unique("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    await _send(broker.address, topic, 100)  # 1.6 MiB: 25 times the bound
    release = asyncio.Event()
    consumed: list[MessageView] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        await release.wait()
        consumed.extend(messages)
        return ConsumeStatus.SUCCESS

    async with PushConsumer(
        group, topic, listener, servers=broker.address, config=_config()
    ) as consumer:
        await eventually(lambda: consumer.statistics().cached > 0)
        most = await _watch(consumer, topic, 1.0)
        assert BOUND <= most <= MOST  # without the bound: every pull the work queue takes
        stats = consumer.statistics()
        assert stats.cached_bytes == stats.cached * BODY == sum(_held(consumer, topic))
        release.set()
        await eventually(lambda: len(consumed) >= 100)
        await eventually(lambda: consumer.statistics().cached_bytes == 0)
    assert sorted(m.queue_offset for m in consumed) == list(range(100))


async def test_a_closed_consumer_holds_and_owns_nothing(broker: BrokerProcess) -> None:
    """After ``aclose`` the consumer has let its queues go (others take them over and what it
    held is redelivered from the committed offsets): its statistics and assigned queues said
    otherwise once, counting the messages a blocked listener never finished."""
    topic, group = unique("closed"), unique("closed")
    await create(broker.address, topic=topic, group=group)
    await _send(broker.address, topic, 20)
    blocked = asyncio.Event()

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        await blocked.wait()  # never set: close gives up on it after close_timeout
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer(
        group, topic, listener, servers=broker.address, config=_config(close_timeout=0.2)
    )
    await consumer.start()
    await eventually(lambda: consumer.statistics().cached > 0)
    assert consumer.assigned_queues
    await consumer.aclose()
    stats = consumer.statistics()
    assert (stats.queues, stats.cached, stats.cached_bytes) == (0, 0, 0)
    assert consumer.assigned_queues == []


async def test_an_orderly_consumer_holds_the_bound_and_counts_nothing_once_finished(
    broker: BrokerProcess,
) -> None:
    topic, group = unique("fifo"), unique("orderly")
    async with Admin(servers=broker.address) as admin:
        await admin.create_topic(topic, queues=1, topic_type="fifo")
        await admin.create_group(group, fifo=True)
    await _send(broker.address, topic, 60, groups=6)
    release = asyncio.Event()
    consumed: list[bytes] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        await release.wait()
        consumed.extend(m.body for m in messages)
        return ConsumeStatus.SUCCESS

    config = _config(orderly=True, suspend_time=0.05)
    async with PushConsumer(
        group, topic, listener, servers=broker.address, config=config
    ) as consumer:
        await eventually(lambda: consumer.statistics().cached > 0)
        assert BOUND <= await _watch(consumer, topic, 1.0) <= MOST
        release.set()
        await eventually(lambda: len(consumed) == 60)
        await eventually(lambda: consumer.statistics().cached_bytes == 0)


async def test_a_queue_dropped_by_a_rebalance_is_consumed_elsewhere_within_the_bound(
    broker: BrokerProcess,
) -> None:
    topic, group = unique("t"), unique("g")
    await create(broker.address, topic=topic, group=group, queues=2)
    await _send(broker.address, topic, 80)
    release = asyncio.Event()
    consumed: set[tuple[int, int]] = set()

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        await release.wait()
        consumed.update((m.queue_id, m.queue_offset) for m in messages)
        return ConsumeStatus.SUCCESS

    first = PushConsumer(group, topic, listener, servers=broker.address, config=_config())
    await first.start()
    try:
        await eventually(
            lambda: len(_held(first, topic)) == 2 and min(_held(first, topic)) >= BOUND
        )
        queues = {key: pq for key, pq in first._state.queues.items() if key[1] == topic}
        async with PushConsumer(group, topic, listener, servers=broker.address, config=_config()):
            # a queue leaves the table first, then is marked dropped once its pull has stopped
            await eventually(lambda: sum(pq.dropped for pq in queues.values()) == 1, timeout=15)
            [dropped] = [pq for pq in queues.values() if pq.dropped]
            assert dropped.key not in first._state.queues
            assert 0 < first.statistics().cached_bytes <= MOST
            release.set()
            await eventually(lambda: len(consumed) == 80, timeout=15)
            await eventually(lambda: first.statistics().cached_bytes == 0)
    finally:
        release.set()
        await first.aclose()
