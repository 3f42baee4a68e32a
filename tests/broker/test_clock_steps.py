"""What a step back of the broker's wall clock does to its other timers (docs/operations.md,
"When the wall clock steps"): each interval or expiry measured on the wall clock counts from the
step, instead of waiting for the clock to catch up with where it was (an hour, for an hour's
step). The scheduler's own case is tests/broker/test_schedule_clock_steps.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pocketmq.broker import Broker, BrokerConfig, InboundMessage
from pocketmq.broker.consumers import ConsumerRegistry
from pocketmq.broker.locks import QueueLocks
from pocketmq.broker.producers import ProducerRegistry

from .test_transactions import GROUP, Clock, _open, _prepare

HOUR = 3600.0


async def test_offsets_are_still_saved_after_a_step_back(tmp_path: Path) -> None:
    clock = Clock()
    config = BrokerConfig(
        data_dir=str(tmp_path), state_persist_interval=0.01, offset_persist_interval=0.05
    )
    broker = Broker(config, clock=clock)
    await broker.start()
    try:
        broker.create_topic("orders", queues=1)
        await asyncio.sleep(0.05)  # a housekeeping round at the right time
        clock.now -= HOUR
        broker.offsets.commit("g", "orders", 0, 0)  # the queue is empty: offset 0 is its end
        broker.offsets.force("g", "orders", 0, 0)
        saved = tmp_path / "config" / "offsets.json"
        for _ in range(100):
            if saved.exists() and "orders" in saved.read_text():
                break
            clock.now += 0.01  # the stepped clock goes on from where it was put
            await asyncio.sleep(0.01)
        assert saved.exists()
        assert "orders" in saved.read_text()
    finally:
        await broker.close()


async def test_the_transaction_floor_is_still_saved_after_a_step_back(tmp_path: Path) -> None:
    clock = Clock()
    broker = await _open(tmp_path, clock)
    try:
        first = await _prepare(broker, "F1")
        broker.transactions.persist(force=True)
        clock.now -= HOUR
        await broker.end_transaction(GROUP, "F1", first, topic="orders", commit=True)
        saved = tmp_path / "config" / "transactions.json"
        for _ in range(60):  # the checker saves the floor once the outcome is flushed
            if saved.exists() and json.loads(saved.read_text())["half_floor"] == 1:
                break
            clock.now += 0.1  # the stepped clock goes on from where it was put
            await asyncio.sleep(0.05)
        assert json.loads(saved.read_text())["half_floor"] == 1
    finally:
        await broker.close()


def test_a_silent_consumer_expires_one_expiry_after_a_step_back() -> None:
    registry = ConsumerRegistry(expiry=30)
    registry.heartbeat("c1", "g", "CLUSTERING", {"orders": "*"}, 1_000_000.0, None)
    stepped = 1_000_000.0 - HOUR
    assert registry.expire(stepped + 1) == []
    assert registry.expire(stepped + 40) == [("g", "c1")]


def test_a_silent_producer_expires_one_expiry_after_a_step_back() -> None:
    registry = ProducerRegistry(expiry=30)
    registry.heartbeat("p1", ["pg"], channel=None, now=1_000_000.0)  # type: ignore[arg-type]
    stepped = 1_000_000.0 - HOUR
    assert registry.expire(stepped + 1) == []
    assert registry.expire(stepped + 40) == [("pg", "p1")]


def test_a_dead_holders_queue_lock_expires_one_expiry_after_a_step_back() -> None:
    now = [1_000_000.0]
    locks = QueueLocks(60, lambda: now[0])
    assert locks.lock("g", "dead", [("orders", 0)]) == [("orders", 0)]
    now[0] -= HOUR - 1
    assert locks.lock("g", "alive", [("orders", 0)]) == []  # still the holder's
    now[0] += 61
    assert locks.lock("g", "alive", [("orders", 0)]) == [("orders", 0)]


async def test_the_backlog_cap_sees_new_commits_after_a_step_back(tmp_path: Path) -> None:
    clock = Clock()
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), max_queue_backlog=3), clock=clock)
    await broker.start()
    try:
        broker.create_topic("orders", queues=1)
        broker.offsets.commit("g", "orders", 0, 0)

        async def send() -> int:
            [outcome] = await broker.send([InboundMessage("orders", b"x", {})])
            return outcome.code

        assert [await send() for _ in range(4)][-1] != 0  # a backlog of 3: refused
        clock.now -= HOUR
        broker.offsets.commit("g", "orders", 0, 3)  # the group caught up
        await asyncio.sleep(0.15)
        assert await send() == 0
    finally:
        await broker.close()
