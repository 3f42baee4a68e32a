"""Two brokers and one name server on loopback: a topic's queues spread across both."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer
from pocketmq.testing import BrokerProcess, NameServerProcess

from ..scratch import scratch_dir
from .conftest import FAST_BROKER, eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[NameServerProcess, BrokerProcess, BrokerProcess]]:
    with scratch_dir(tmp_path_factory, "cluster") as root, NameServerProcess(root) as namesrv:
        brokers: list[BrokerProcess] = []
        try:
            for name in ("a", "b"):
                brokers.append(
                    BrokerProcess(
                        root / name,
                        namesrv=namesrv.address,
                        broker_name=f"broker-{name}",
                        config=FAST_BROKER,
                        grpc_port=None,
                    )
                )
            yield namesrv, brokers[0], brokers[1]
        finally:
            for broker in brokers:  # also when the second one failed to start
                broker.stop()


async def _create_everywhere(brokers: list[BrokerProcess], topic: str, group: str) -> None:
    async with Admin(servers=brokers[0].address) as admin:  # applies to every broker
        assert {b.name for b in await admin.brokers()} == {"broker-a", "broker-b"}
        await admin.create_topic(topic, queues=4)
        await admin.create_group(group)


async def test_queues_spread_over_both_brokers(
    cluster: tuple[NameServerProcess, BrokerProcess, BrokerProcess], names: Callable[[str], str]
) -> None:
    _, a, b = cluster
    topic, group = names("t"), names("g")
    await _create_everywhere([a, b], topic, group)
    got: set[str] = set()

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        got.update(m.message_id for m in messages)
        return ConsumeStatus.SUCCESS

    async with Producer(servers=a.address) as producer:  # any broker is an access point
        route = await producer.routes.get(topic, refresh=True)
        assert sorted(route.addresses) == ["broker-a", "broker-b"]
        assert len(route.writable) == 8
        results = [await producer.send(Message(topic=topic, body=b"x")) for _ in range(40)]
    assert {r.broker_name for r in results} == {"broker-a", "broker-b"}
    async with PushConsumer(group, topic, listener, servers=b.address) as consumer:
        await eventually(lambda: len(got) == 40)
        assert {q[0] for q in consumer.assigned_queues if q[1] == topic} == {"broker-a", "broker-b"}


async def test_producer_moves_to_the_other_broker_when_one_dies(
    cluster: tuple[NameServerProcess, BrokerProcess, BrokerProcess], names: Callable[[str], str]
) -> None:
    _, a, b = cluster
    topic, group = names("t"), names("g")
    await _create_everywhere([a, b], topic, group)
    async with Producer(servers=[a.address, b.address]) as producer:
        await producer.routes.get(topic, refresh=True)
        b.kill()
        try:
            results = [await producer.send(Message(topic=topic, body=b"x")) for _ in range(20)]
            assert {r.broker_name for r in results} == {"broker-a"}
            assert producer.statistics().retries >= 1
        finally:
            b.restart()
            await asyncio.sleep(0.1)
