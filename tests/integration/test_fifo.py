"""Ordered (FIFO) messages end to end (seed 002; issue 5).

The property checked everywhere: for every message group, the order in which messages were
*first successfully consumed* equals the order in which they were sent — under random listener
failures, consumer restarts and rebalances. And a group that keeps failing does not hold up the
other groups sharing its queue.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer, PushConsumerConfig, SimpleConsumer
from pocketmq.testing import BrokerProcess

from .conftest import eventually

pytestmark = pytest.mark.integration


async def _fifo_setup(
    address: str,
    topic: str,
    group: str,
    *,
    queues: int = 4,
    max_retries: int = 16,
    retry_delays: tuple[float, ...] = (0.05,),
) -> None:
    async with Admin(servers=address) as admin:
        await admin.create_topic(topic, queues=queues, topic_type="fifo")
        await admin.create_group(
            group, fifo=True, max_retries=max_retries, retry_delays=retry_delays
        )


async def _send_groups(
    address: str, topic: str, groups: int, per_group: int
) -> dict[str, list[str]]:
    """Send ``per_group`` messages for each group, interleaved; returns ids in send order."""
    sent: dict[str, list[str]] = defaultdict(list)
    async with Producer(servers=address) as producer:

        async def one_group(g: int) -> None:
            name = f"order-{g}"
            for n in range(per_group):
                result = await producer.send(
                    Message(topic=topic, body=f"{name}:{n}".encode(), message_group=name)
                )
                sent[name].append(result.message_id)

        await asyncio.gather(*(one_group(g) for g in range(groups)))
    return sent


def _assert_order(sent: dict[str, list[str]], first_success: dict[str, list[str]]) -> None:
    for group, ids in sent.items():
        assert first_success[group] == ids, f"group {group} out of order"


async def test_orderly_push_consumers_keep_group_order_through_failures_and_rebalances(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("fifo"), names("orderly")
    await _fifo_setup(broker.address, topic, group, max_retries=-1)
    rng = random.Random(7)
    done: set[str] = set()
    first_success: dict[str, list[str]] = defaultdict(list)

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        [message] = messages
        if rng.random() < 0.15:
            return ConsumeStatus.RECONSUME_LATER
        if message.message_id not in done:
            done.add(message.message_id)
            first_success[message.message_group or ""].append(message.message_id)
        return ConsumeStatus.SUCCESS

    config = PushConsumerConfig(
        orderly=True, suspend_time=0.02, concurrency=8, lock_renew_interval=0.5
    )
    first = PushConsumer(group, topic, listener, servers=broker.address, config=config)
    await first.start()
    sent_task = asyncio.create_task(_send_groups(broker.address, topic, groups=30, per_group=15))
    await asyncio.sleep(0.3)
    second = PushConsumer(group, topic, listener, servers=broker.address, config=config)
    await second.start()  # rebalance: queues move between live consumers
    await asyncio.sleep(0.5)
    await first.aclose()  # the survivor takes its queues over
    third = PushConsumer(group, topic, listener, servers=broker.address, config=config)
    await third.start()
    sent = await sent_task
    total = sum(len(ids) for ids in sent.values())
    await eventually(lambda: len(done) == total, timeout=60)
    await second.aclose()
    await third.aclose()
    _assert_order(sent, first_success)


async def test_poison_group_does_not_stall_other_groups_on_its_queue_orderly(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("fifo"), names("orderly")
    await _fifo_setup(broker.address, topic, group, queues=1, max_retries=-1)  # never skip
    consumed: list[str] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        [message] = messages
        if message.message_group == "poison":
            return ConsumeStatus.RECONSUME_LATER
        consumed.append(message.body.decode())
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        await producer.send(Message(topic=topic, body=b"bad", message_group="poison"))
        for n in range(20):
            await producer.send(Message(topic=topic, body=b"ok-%d" % n, message_group=f"g{n % 4}"))
    config = PushConsumerConfig(orderly=True, suspend_time=0.05)
    async with PushConsumer(
        group, topic, listener, servers=broker.address, config=config
    ) as consumer:
        await eventually(lambda: len(consumed) == 20)
        assert consumer.statistics().local_retries >= 1  # the poison message is still retried
    assert sorted(consumed) == sorted(f"ok-{n}" for n in range(20))
    for lane in range(4):  # order holds within each group; groups run side by side
        in_group = [body for body in consumed if int(body[3:]) % 4 == lane]
        assert in_group == [f"ok-{n}" for n in range(lane, 20, 4)]


async def test_orderly_consumer_moves_a_message_to_the_dlq_after_max_retries_and_continues(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("fifo"), names("orderly")
    await _fifo_setup(broker.address, topic, group, queues=1, max_retries=2)
    consumed: list[bytes] = []

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        if messages[0].body == b"1":
            raise ValueError("cannot parse")
        consumed.append(messages[0].body)
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        for n in range(3):
            await producer.send(Message(topic=topic, body=b"%d" % n, message_group="one"))
    config = PushConsumerConfig(orderly=True, suspend_time=0.05)
    async with PushConsumer(
        group, topic, listener, servers=broker.address, config=config
    ) as consumer:
        await eventually(lambda: consumed == [b"0", b"2"])
        assert consumer.statistics().dead_lettered == 1
    async with Admin(servers=broker.address) as admin:
        [letter] = await admin.dead_letters(group)
    assert letter.message.body == b"1"


async def test_pop_fifo_blocks_per_group_and_keeps_order_with_failures_and_crashes(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("fifo"), names("popfifo")
    await _fifo_setup(broker.address, topic, group, queues=2)
    sent = await _send_groups(broker.address, topic, groups=12, per_group=10)
    total = sum(len(ids) for ids in sent.values())
    rng = random.Random(3)
    done: set[str] = set()
    first_success: dict[str, list[str]] = defaultdict(list)

    async def worker(crash_after: int | None) -> None:
        handled = 0
        async with SimpleConsumer(
            group, topic, servers=broker.address, await_duration=0.2
        ) as consumer:
            while len(done) < total:
                batch = await consumer.receive(16, invisible_duration=0.5)
                if crash_after is not None and handled >= crash_after:
                    return  # dies holding a batch: its groups resume after 0.5 s
                by_group: dict[str, list[MessageView]] = defaultdict(list)
                for message in batch:
                    by_group[message.message_group or ""].append(message)
                for run in by_group.values():  # serial per group: stop a run at its first failure
                    for message in run:
                        if rng.random() < 0.2:
                            await consumer.change_invisible_duration(message, 0.05)
                            break
                        if message.message_id not in done:
                            done.add(message.message_id)
                            first_success[message.message_group or ""].append(message.message_id)
                        await consumer.ack(message)
                        handled += 1

    await asyncio.wait_for(asyncio.gather(worker(None), worker(25), worker(None)), timeout=90)
    assert len(done) == total
    _assert_order(sent, first_success)


async def test_pop_fifo_poison_group_does_not_block_its_queue_neighbours(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("fifo"), names("popfifo")
    await _fifo_setup(broker.address, topic, group, queues=1)
    async with Producer(servers=broker.address) as producer:
        await producer.send(Message(topic=topic, body=b"bad-0", message_group="poison"))
        await producer.send(Message(topic=topic, body=b"bad-1", message_group="poison"))
        for n in range(10):
            await producer.send(Message(topic=topic, body=b"ok-%d" % n, message_group=f"g{n % 3}"))
    healthy: list[bytes] = []
    poison_seen: list[tuple[bytes, int]] = []
    started = time.monotonic()
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=0.2) as consumer:
        while len(healthy) < 10 and time.monotonic() - started < 20:
            failed_groups: set[str] = set()
            for message in await consumer.receive(8, invisible_duration=5):
                if message.message_group in failed_groups:
                    continue  # serial per group: the rest of a failed group's run waits
                if message.message_group == "poison":
                    poison_seen.append((message.body, message.delivery_attempt))
                    await consumer.change_invisible_duration(message, 5)  # keeps failing
                    failed_groups.add("poison")
                else:
                    healthy.append(message.body)
                    await consumer.ack(message)
    assert sorted(healthy) == sorted(b"ok-%d" % n for n in range(10))
    assert [body for body, _ in poison_seen] == [b"bad-0"]  # bad-1 waits behind bad-0


async def test_pop_fifo_dead_letters_after_max_attempts_and_the_group_continues(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("fifo"), names("popfifo")
    await _fifo_setup(broker.address, topic, group, queues=1, max_retries=1)
    async with Producer(servers=broker.address) as producer:
        for n in range(3):
            await producer.send(Message(topic=topic, body=b"%d" % n, message_group="g"))
    got: list[tuple[bytes, int]] = []
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=0.3) as consumer:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len([b for b, _ in got if b != b"0"]) < 2:
            for message in await consumer.receive(1, invisible_duration=0.2):
                got.append((message.body, message.delivery_attempt))
                if message.body != b"0":
                    await consumer.ack(message)
    assert got[:2] == [(b"0", 1), (b"0", 2)]  # two attempts, then the DLQ
    assert [b for b, _ in got[2:]] == [b"1", b"2"]
    async with Admin(servers=broker.address) as admin:
        assert [d.message.body for d in await admin.dead_letters(group)] == [b"0"]
