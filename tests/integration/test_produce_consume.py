"""Producer and consumers against a real broker process: the happy paths and bad input."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable

import pytest

from pocketmq import (
    ConsumeStatus,
    InvalidArgumentError,
    Message,
    MessageTooLargeError,
    MessageView,
    TopicNotFoundError,
)
from pocketmq.client import (
    Admin,
    Producer,
    ProducerConfig,
    PushConsumer,
    PushConsumerConfig,
    SimpleConsumer,
)
from pocketmq.errors import GroupNotFoundError, InvalidReceiptHandleError
from pocketmq.testing import BrokerProcess

from .conftest import create, eventually

pytestmark = pytest.mark.integration


async def test_send_then_push_consume_everything_once(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group)
    got: list[MessageView] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        got.extend(messages)
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        sent = [
            await producer.send(
                Message(topic=topic, body=f"m{i}".encode(), tag="T", keys=(f"k{i}",))
            )
            for i in range(40)
        ]
        async with PushConsumer(group, topic, listener, servers=broker.address):
            await eventually(lambda: len(got) >= 40)
            await asyncio.sleep(0.3)
    assert sorted(m.message_id for m in got) == sorted(r.message_id for r in sent)
    assert len({r.message_id for r in sent}) == 40
    assert {r.queue_id for r in sent} == {0, 1, 2, 3}  # round robin over the queues
    first = next(m for m in got if m.message_id == sent[0].message_id)
    assert (first.body, first.tag, first.keys, first.delivery_attempt) == (b"m0", "T", ("k0",), 1)
    assert first.topic == topic


async def test_send_variants_async_oneway_batch_and_auto_batching(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=2)
    callbacks: list[str] = []
    async with Producer(servers=broker.address) as producer:
        task = producer.send_async(
            Message(topic=topic, body=b"async"),
            lambda r, e: callbacks.append(r.message_id if r else repr(e)),
        )
        result = await task
        await producer.send_oneway(Message(topic=topic, body=b"oneway"))
        batch = await producer.send_batch(
            [Message(topic=topic, body=b"b%d" % i) for i in range(10)]
        )
        assert len({r.queue_id for r in batch}) == 1  # one request, one queue
        assert [r.queue_offset for r in batch] == list(
            range(batch[0].queue_offset, batch[0].queue_offset + 10)
        )
    assert callbacks == [result.message_id]
    async with Producer(
        servers=broker.address, config=ProducerConfig(linger=0.01, max_batch=50)
    ) as batching:
        results = await asyncio.gather(
            *(batching.send(Message(topic=topic, body=b"x")) for _ in range(200))
        )
        assert batching.statistics().batches < 20
    assert len({r.message_id for r in results}) == 200
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=1) as consumer:
        seen: set[str] = set()
        while True:
            messages = await consumer.receive(64)
            if not messages:
                break
            seen.update(m.message_id for m in messages)
            await consumer.ack_many(messages)
    assert len(seen) == 1 + 1 + 10 + 200


async def test_tag_filter_and_lookup_by_id_and_key(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group)
    async with Producer(servers=broker.address) as producer:
        for i in range(12):
            await producer.send(
                Message(
                    topic=topic, body=b"x", tag="A" if i % 3 == 0 else "B", keys=(f"order-{i}",)
                )
            )
    async with SimpleConsumer(
        group, {topic: "A"}, servers=broker.address, await_duration=0.5
    ) as consumer:
        tagged = []
        while batch := await consumer.receive(32):
            tagged += batch
            await consumer.ack_many(batch)
    assert sorted(m.keys[0] for m in tagged) == ["order-0", "order-3", "order-6", "order-9"]
    async with Admin(servers=broker.address) as admin:
        [found] = await admin.query_by_key(topic, "order-7")
        assert found.tag == "B"
        assert [m.keys for m in await admin.query_message(found.message_id)] == [("order-7",)]


async def test_bad_input_gets_clear_errors_and_the_broker_keeps_serving(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("t")
    await create(broker.address, topic=topic)
    async with Producer(servers=broker.address) as producer:
        with pytest.raises(TopicNotFoundError, match="pocketmq topic create"):
            await producer.send(Message(topic=names("missing"), body=b"x"))
        with pytest.raises(InvalidArgumentError, match="empty"):
            await producer.send(Message(topic=topic, body=b""))
        with pytest.raises(InvalidArgumentError, match="bytes"):
            await producer.send(Message(topic=topic, body="text"))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="the limit is"):
            await producer.send(Message(topic=topic, body=b"x" * (4 * 1024 * 1024 + 1)))
        producer.config = ProducerConfig(
            max_message_size=64 * 1024 * 1024
        )  # bypass the client check
        with pytest.raises(MessageTooLargeError, match="limit"):
            await producer.send(Message(topic=topic, body=b"x" * (4 * 1024 * 1024 + 1)))
        assert (await producer.send(Message(topic=topic, body=b"still fine"))).queue_offset >= 0
    with pytest.raises(GroupNotFoundError, match="pocketmq group create"):
        async with SimpleConsumer(names("nogroup"), topic, servers=broker.address) as consumer:
            await consumer.receive(1)


async def test_simple_consumer_invisibility_ack_and_stale_handles(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    async with Producer(servers=broker.address) as producer:
        await producer.send(Message(topic=topic, body=b"one"))
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=0.2) as consumer:
        [first] = await consumer.receive(1, invisible_duration=0.5)
        assert first.delivery_attempt == 1
        assert await consumer.receive(1, invisible_duration=0.5) == []  # hidden
        await asyncio.sleep(0.6)
        [again] = await consumer.receive(1, invisible_duration=5)
        assert again.message_id == first.message_id
        assert again.delivery_attempt == 2
        with pytest.raises(InvalidReceiptHandleError, match="stale"):
            await consumer.ack(first)
        later = await consumer.change_invisible_duration(again, 0)
        [third] = await consumer.receive(1, invisible_duration=5)
        assert third.delivery_attempt == 3
        with pytest.raises(InvalidReceiptHandleError):
            await consumer.ack(later)
        await consumer.ack(third)
        with pytest.raises(InvalidReceiptHandleError, match="unknown"):
            await consumer.ack(third)
        assert await consumer.receive(1) == []


async def test_clustering_consumers_share_queues_and_rebalance(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=8)
    counts: collections.Counter[str] = collections.Counter()

    def listener_for(name: str) -> Callable[[list[MessageView]], ConsumeStatus]:
        def listener(messages: list[MessageView]) -> ConsumeStatus:
            for message in messages:
                counts[message.message_id] += 1
            return ConsumeStatus.SUCCESS

        return listener

    first = PushConsumer(group, topic, listener_for("a"), servers=broker.address)
    second = PushConsumer(group, topic, listener_for("b"), servers=broker.address)
    await first.start()
    assert len([q for q in first.assigned_queues if q[1] == topic]) == 8
    await second.start()
    await eventually(
        lambda: (
            len([q for q in first.assigned_queues if q[1] == topic]) == 4
            and len([q for q in second.assigned_queues if q[1] == topic]) == 4
        )
    )
    mine_a = {q for q in first.assigned_queues if q[1] == topic}
    mine_b = {q for q in second.assigned_queues if q[1] == topic}
    assert not mine_a & mine_b
    async with Producer(servers=broker.address) as producer:
        sent = [
            (await producer.send(Message(topic=topic, body=b"x"))).message_id for _ in range(64)
        ]
    await eventually(lambda: len(counts) == 64)
    await second.aclose()  # leaves: the survivor takes every queue over
    await eventually(lambda: len([q for q in first.assigned_queues if q[1] == topic]) == 8)
    async with Producer(servers=broker.address) as producer:
        sent += [
            (await producer.send(Message(topic=topic, body=b"y"))).message_id for _ in range(32)
        ]
    await eventually(lambda: len(counts) == 96)
    await first.aclose()
    assert set(counts) == set(sent)


async def test_offsets_survive_consumers_and_resume_where_they_stopped(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=2)
    seen: list[str] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        seen.extend(m.message_id for m in messages)
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        batch1 = [
            (await producer.send(Message(topic=topic, body=b"1"))).message_id for _ in range(10)
        ]
        async with PushConsumer(group, topic, listener, servers=broker.address):
            await eventually(lambda: len(seen) == 10)
        batch2 = [
            (await producer.send(Message(topic=topic, body=b"2"))).message_id for _ in range(10)
        ]
        async with PushConsumer(group, topic, listener, servers=broker.address):
            await eventually(lambda: len(seen) >= 20)
            await asyncio.sleep(0.3)
    assert seen[:10] == batch1 or sorted(seen[:10]) == sorted(batch1)
    assert sorted(seen[10:]) == sorted(batch2)  # nothing consumed twice after a clean close
    async with Admin(servers=broker.address) as admin:
        queues = await admin.queues(topic, group)
    assert sum(q.lag for q in queues) == 0


async def test_committed_offset_never_passes_an_unfinished_message(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    release = asyncio.Event()
    finished: list[int] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        if messages[0].body == b"slow":
            await release.wait()
        finished.append(messages[0].queue_offset)
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        await producer.send(Message(topic=topic, body=b"slow"))
        for _ in range(5):
            await producer.send(Message(topic=topic, body=b"fast"))
    consumer = PushConsumer(group, topic, listener, servers=broker.address)
    await consumer.start()
    await eventually(lambda: len(finished) == 5)
    await consumer._offsets.persist()  # what the 5 s timer would do
    async with Admin(servers=broker.address) as admin:
        [queue] = await admin.queues(topic, group)
    assert queue.committed_offset == 0  # offsets 1..5 are done, 0 is not
    release.set()
    await eventually(lambda: len(finished) == 6)
    await consumer.aclose()
    async with Admin(servers=broker.address) as admin:
        [queue] = await admin.queues(topic, group)
    assert queue.committed_offset == 6


async def test_a_stuck_message_stops_pulling_past_the_max_span(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    """RocketMQ's consumeConcurrentlyMaxSpan: a message that never finishes holds the committed
    offset back, so the consumer stops pulling once ``max_span`` offsets lie behind it instead of
    piling up what a restart would consume again; it goes on once the message finishes."""
    from pocketmq.client import PushConsumerConfig

    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    release = asyncio.Event()
    finished: list[int] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        if messages[0].queue_offset == 0:
            await release.wait()
        finished.append(messages[0].queue_offset)
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        await producer.send_batch([Message(topic=topic, body=b"m")] * 200)
    config = PushConsumerConfig(max_span=40, pull_batch=10)
    consumer = PushConsumer(group, topic, listener, servers=broker.address, config=config)
    await consumer.start()
    try:
        await eventually(lambda: len(finished) >= 30)
        await asyncio.sleep(0.5)  # time to pull on, were it not held back
        assert max(finished) <= 40 + 10  # at most one pull past the span
        assert len(finished) < 199
        release.set()
        await eventually(lambda: len(finished) == 200)
        assert sorted(finished) == list(range(200))
    finally:
        release.set()
        await consumer.aclose()


async def test_broadcasting_delivers_everything_to_everyone(
    broker: BrokerProcess, names: Callable[[str], str], tmp_path: object
) -> None:
    from pocketmq.client import MessageModel, PushConsumerConfig

    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, broadcast=True)
    received: dict[str, set[str]] = {"a": set(), "b": set()}

    def listener_for(name: str) -> Callable[[list[MessageView]], ConsumeStatus]:
        def listener(messages: list[MessageView]) -> ConsumeStatus:
            received[name].update(m.message_id for m in messages)
            return ConsumeStatus.RECONSUME_LATER if name == "b" else ConsumeStatus.SUCCESS

        return listener

    config = PushConsumerConfig(model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path))
    async with (
        PushConsumer(group, topic, listener_for("a"), servers=broker.address, config=config),
        PushConsumer(group, topic, listener_for("b"), servers=broker.address, config=config) as b,
        Producer(servers=broker.address) as producer,
    ):
        sent = {
            (await producer.send(Message(topic=topic, body=b"x"))).message_id for _ in range(20)
        }
        await eventually(lambda: received["a"] == sent and received["b"] == sent)
        await asyncio.sleep(0.3)
        assert b.statistics().dropped_broadcast_failures == 20  # failures are dropped, not retried
        assert b.statistics().sent_back == 0


async def test_an_inline_plain_listener_consumes_on_the_loop_and_its_failures_come_back(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    """``listener_thread=False``: the function runs on the consumer's own thread, and a message
    it refuses once is retried by the broker like any other."""
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, retry_delays=(0.1,))
    attempts: collections.Counter[bytes] = collections.Counter()
    threads: set[int] = set()

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        threads.add(threading.get_ident())
        [message] = messages
        attempts[message.body] += 1
        if message.body == b"m3" and message.delivery_attempt == 1:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.SUCCESS

    config = PushConsumerConfig(listener_thread=False)
    async with Producer(servers=broker.address) as producer:
        for n in range(6):
            await producer.send(Message(topic=topic, body=f"m{n}".encode()))
    async with PushConsumer(group, topic, listener, servers=broker.address, config=config):
        await eventually(lambda: attempts[b"m3"] == 2 and len(attempts) == 6)
    assert threads == {threading.get_ident()}
    assert {body: n for body, n in attempts.items() if n != 1} == {b"m3": 2}
