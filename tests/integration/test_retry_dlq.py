"""Retry, delay, dead letters, redrive, attempt history, send-back fallbacks and flow control,
against real broker processes (seed 000/001/004 semantics; docs/semantics.md)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pocketmq import ConsumeStatus, Message, MessageView, TooManyRequestsError
from pocketmq.client import (
    Admin,
    Producer,
    ProducerConfig,
    PushConsumer,
    PushConsumerConfig,
    SimpleConsumer,
)
from pocketmq.errors import NoPermissionError
from pocketmq.testing import BrokerProcess

from .conftest import FAST_BROKER, create, eventually

pytestmark = pytest.mark.integration


def _with(**broker: object) -> dict[str, dict[str, object]]:
    return {"broker": {**FAST_BROKER["broker"], **broker}, "store": dict(FAST_BROKER["store"])}


async def _fail_forever(
    broker: BrokerProcess, topic: str, group: str, deliveries: dict[str, list[tuple[float, int]]]
) -> PushConsumer:
    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        for message in messages:
            deliveries.setdefault(message.message_id, []).append(
                (time.monotonic(), message.delivery_attempt)
            )
        raise RuntimeError("payment service unavailable")

    consumer = PushConsumer(group, topic, listener, servers=broker.address)
    await consumer.start()
    return consumer


async def test_retries_follow_the_group_policy_then_the_dlq_then_redrive(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(
        broker.address, topic=topic, group=group, max_retries=3, retry_delays=[0.2, 0.4, 0.6]
    )
    deliveries: dict[str, list[tuple[float, int]]] = {}
    async with Producer(servers=broker.address) as producer:
        sent = await producer.send(Message(topic=topic, body=b"charge", keys=("order-1",)))
    consumer = await _fail_forever(broker, topic, group, deliveries)
    try:
        await eventually(lambda: len(deliveries.get(sent.message_id, [])) >= 4, timeout=15)
        await asyncio.sleep(0.8)
    finally:
        await consumer.aclose()
    times = deliveries[sent.message_id]
    assert [attempt for _, attempt in times] == [1, 2, 3, 4]  # 1 + max_retries deliveries
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(times)]
    for gap, expected in zip(gaps, [0.2, 0.4, 0.6], strict=True):
        assert expected - 0.05 <= gap <= expected + 1.0, gaps

    async with Admin(servers=broker.address) as admin:
        [letter] = await admin.dead_letters(group)
        assert letter.message.message_id == sent.message_id
        assert letter.origin_topic == topic
        assert "4 times" in letter.reason
        history = await admin.message_history(sent.message_id)
        outcomes = [(a.attempt, a.outcome) for a in history if a.group == group]
        assert outcomes == [
            (1, "EXCEPTION"),
            (2, "EXCEPTION"),
            (3, "EXCEPTION"),
            (4, "EXCEPTION"),
            (4, "DLQ"),
        ]
        assert all(
            "payment service unavailable" in a.error for a in history if a.outcome == "EXCEPTION"
        )
        assert all(a.consumer for a in history if a.outcome == "EXCEPTION")

    # the dead-letter topic is write-only for consumers
    async with SimpleConsumer(group, "%DLQ%" + group, servers=broker.address) as peek:
        with pytest.raises(NoPermissionError, match="dead-letter"):
            await peek.receive(1)

    # redrive: back to the original topic with the same id, once
    received: list[MessageView] = []

    async def healthy(messages: list[MessageView]) -> ConsumeStatus:
        received.extend(messages)
        return ConsumeStatus.SUCCESS

    async with Admin(servers=broker.address) as admin:
        first = await admin.redrive(letter.address, group, [letter.dlq_offset])
        again = await admin.redrive(letter.address, group, [letter.dlq_offset])
    assert [i.status for i in first.items] == ["resent"]
    assert first.items[0].topic == topic
    assert [i.status for i in again.items] == ["already"]
    async with PushConsumer(group, topic, healthy, servers=broker.address):
        await eventually(lambda: any(m.message_id == sent.message_id for m in received))
    assert [m.body for m in received if m.message_id == sent.message_id] == [b"charge"]
    async with Admin(servers=broker.address) as admin:
        history = await admin.message_history(sent.message_id)
    assert [a.outcome for a in history][-2:] == ["REDRIVEN", "SUCCESS"]


async def test_default_policy_waits_on_delay_levels_from_level_3(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, max_retries=2)
    deliveries: dict[str, list[tuple[float, int]]] = {}
    async with Producer(servers=broker.address) as producer:
        sent = await producer.send(Message(topic=topic, body=b"x"))
    consumer = await _fail_forever(broker, topic, group, deliveries)
    try:
        await eventually(lambda: len(deliveries.get(sent.message_id, [])) >= 3, timeout=15)
    finally:
        await consumer.aclose()
    times = [t for t, _ in deliveries[sent.message_id]]
    # fast test levels are 0.1 s * level: level 3 = 0.3 s, then level 4 = 0.4 s (seed 000)
    assert 0.25 <= times[1] - times[0] <= 1.2
    assert 0.35 <= times[2] - times[1] <= 1.3


async def test_ack_index_retries_only_the_tail_of_a_batch(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    from pocketmq.client import ConsumeContext

    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1, retry_delays=[0.1])
    calls: list[list[bytes]] = []

    def listener(messages: list[MessageView], context: ConsumeContext) -> ConsumeStatus:
        calls.append([m.body for m in messages])
        if len(messages) == 3:
            context.ack_index = 0  # the first succeeded, the other two must be retried
        return ConsumeStatus.SUCCESS

    async with Producer(servers=broker.address) as producer:
        await producer.send_batch([Message(topic=topic, body=b"%d" % i) for i in range(3)])
    config = PushConsumerConfig(batch_size=3)
    async with PushConsumer(
        group, topic, listener, servers=broker.address, config=config
    ) as consumer:
        await eventually(lambda: sum(len(c) for c in calls) >= 5)
        assert consumer.statistics().sent_back == 2
    assert calls[0] == [b"0", b"1", b"2"]
    assert sorted(b for c in calls[1:] for b in c) == [b"1", b"2"]


async def test_send_back_failure_falls_back_to_resend_then_to_local_retry(tmp_path: Path) -> None:
    rules = tmp_path / "faults.json"  # the store's fault rules; the broker asks them too
    rules.write_text(
        '{"rules": [{"op": "send_back", "target": "broker", "count": 3},'
        ' {"op": "retry_send", "target": "broker", "count": 1}]}'
    )
    config = _with()
    config["store"]["fault_file"] = str(rules)
    with BrokerProcess(tmp_path, config=config, grpc_port=None) as broker:
        await create(
            broker.address, topic="orders", group="billing", queues=1, retry_delays=[0.1, 0.1, 0.1]
        )
        attempts: list[int] = []

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            attempts.extend(m.delivery_attempt for m in messages)
            return ConsumeStatus.SUCCESS if len(attempts) >= 4 else ConsumeStatus.RECONSUME_LATER

        async with Producer(servers=broker.address) as producer:
            await producer.send(Message(topic="orders", body=b"x"))
        consumer_config = PushConsumerConfig(local_retry_delay=0.3)
        async with PushConsumer(
            "billing", "orders", listener, servers=broker.address, config=consumer_config
        ) as consumer:
            await eventually(lambda: consumer.statistics().consumed == 1, timeout=15)
            stats = consumer.statistics()
            # 1st failure: send-back and re-send rejected -> kept and consumed again locally
            assert stats.local_retries == 1
            # 2nd and 3rd failures: send-back rejected, re-send accepted
            assert stats.resent == 2
            assert stats.sent_back == 0
            async with Admin(servers=broker.address) as admin:
                [queue] = await admin.queues("orders", "billing")
            assert stats.consumed == 1
        assert attempts[:2] == [1, 2]  # the local retry counts as another attempt
        assert queue.max_offset == 1


async def test_pop_mode_redelivers_with_attempt_plus_one_then_dead_letters(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1, max_retries=1)
    async with Producer(servers=broker.address) as producer:
        sent = await producer.send(Message(topic=topic, body=b"never acked"))
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=0.3) as consumer:
        [first] = await consumer.receive(1, invisible_duration=0.3)
        await asyncio.sleep(0.4)
        [second] = await consumer.receive(1, invisible_duration=0.3)
        assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
        await asyncio.sleep(1.2)  # expires again: max attempts (2) used up -> DLQ
        assert await consumer.receive(1) == []
    async with Admin(servers=broker.address) as admin:
        [letter] = await admin.dead_letters(group)
        assert letter.message.message_id == sent.message_id
        history = await admin.message_history(sent.message_id)
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, "INVISIBLE_EXPIRED"),
        (2, "INVISIBLE_EXPIRED"),
        (1, "DLQ"),
    ]


async def test_delayed_messages_arrive_on_time(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=2)
    async with Producer(servers=broker.address) as producer:
        due = time.time() + 1.0
        result = await producer.send(Message(topic=topic, body=b"later", delivery_time=due))
        assert result.queue_offset == -1  # assigned on delivery
        await producer.send(Message(topic=topic, body=b"now"))
    async with SimpleConsumer(group, topic, servers=broker.address, await_duration=0.2) as consumer:
        early = await consumer.receive(10)
        assert [m.body for m in early] == [b"now"]
        await consumer.ack_many(early)
        got: list[MessageView] = []
        while not got:
            got = await consumer.receive(10)
        arrived = time.time()
        assert [m.body for m in got] == [b"later"]
        assert got[0].message_id == result.message_id
        assert due - 0.01 <= arrived <= due + 0.5


async def test_scheduled_messages_survive_a_restart(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None, flush="sync") as broker:
        await create(broker.address, topic="later", group="g", queues=1)
        async with Producer(servers=broker.address) as producer:
            sent = await producer.send(
                Message(topic="later", body=b"x", delivery_time=time.time() + 1.5)
            )
        broker.kill()  # SIGKILL: nothing but the sync-flushed log survives
        broker.restart()
        async with SimpleConsumer(
            "g", "later", servers=broker.address, await_duration=0.5
        ) as consumer:
            deadline = time.monotonic() + 10
            got: list[MessageView] = []
            while not got and time.monotonic() < deadline:
                got = await consumer.receive(1)
        assert [m.message_id for m in got] == [sent.message_id]


async def test_pop_state_survives_a_graceful_restart(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, config=FAST_BROKER, grpc_port=None) as broker:
        await create(broker.address, topic="jobs", group="workers", queues=1)
        async with Producer(servers=broker.address) as producer:
            for n in range(3):
                await producer.send(Message(topic="jobs", body=b"%d" % n))
        # Hidden long enough that a restart on a busy machine (a new Python process) ends
        # well inside the window; then wait out what is left of it, measured from the receive.
        hidden = 8.0  # a restart took over 3.5 s at load 5 (4 s was too short)
        async with SimpleConsumer(
            "workers", "jobs", servers=broker.address, await_duration=0.5
        ) as consumer:
            taken = await consumer.receive(3, invisible_duration=hidden)
            visible_again = time.monotonic() + hidden
            await consumer.ack(taken[0])
        broker.restart()
        async with SimpleConsumer(
            "workers", "jobs", servers=broker.address, await_duration=0.5
        ) as consumer:
            assert time.monotonic() < visible_again - 0.5, "the restart took too long to test"
            assert await consumer.receive(3, invisible_duration=5) == []  # still invisible
            await asyncio.sleep(max(0.0, visible_again - time.monotonic()) + 0.3)
            again = await consumer.receive(3, invisible_duration=5)
    assert sorted(m.body for m in again) == [b"1", b"2"]
    assert {m.delivery_attempt for m in again} == {2}


async def test_flow_control_backlog_cap_answers_530_and_the_producer_backs_off(
    tmp_path: Path,
) -> None:
    with BrokerProcess(tmp_path, config=_with(max_queue_backlog=5), grpc_port=None) as broker:
        await create(broker.address, topic="capped", group="g", queues=1)
        async with SimpleConsumer(
            "g", "capped", servers=broker.address, await_duration=0.1
        ) as consumer:
            assert await consumer.receive(1) == []  # the group now has a committed offset: 0
            async with Producer(
                servers=broker.address, config=ProducerConfig(send_timeout=1.5)
            ) as producer:
                for _ in range(5):
                    await producer.send(Message(topic="capped", body=b"x"))
                started = time.monotonic()
                with pytest.raises(TooManyRequestsError, match="flow control"):
                    await producer.send(Message(topic="capped", body=b"one too many"))
                assert producer.statistics().backoffs >= 1
                assert time.monotonic() - started >= 0.9  # it waited out the 1 s backoff

                async def drain_soon() -> None:
                    await asyncio.sleep(0.3)
                    batch = await consumer.receive(10)
                    await consumer.ack_many(batch)

                drain = asyncio.create_task(drain_soon())
                patient = ProducerConfig(send_timeout=5.0)
                async with Producer(servers=broker.address, config=patient) as waiting:
                    result = await waiting.send(
                        Message(topic="capped", body=b"accepted after backoff")
                    )
                    assert waiting.statistics().backoffs == 1
                await drain
        assert result.queue_offset == 5
