"""The exactly-once chaos test against a real broker process (issue 8).

The same business model and assertions as ``tests/reliability/test_chaos.py``, but the messages
travel through a real ``pocketmq serve``, a real ``Producer`` and a real ``PushConsumer`` (whose
failed deliveries go through the real retry topic). Faults are injected where the real system
would produce them — at the producer/broker boundary: sends refused, outcomes unknown (stored or
not), messages stored and then lost (they land on a topic nobody reads), messages stored twice;
plus handlers that crash after writing their effects, producers that crash between commit and
send, and a Redis that forgets its keys. At the end every stub must be CONFIRMED exactly once and
every business effect applied exactly once.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import (
    Admin,
    Message,
    Producer,
    PushConsumer,
    PushConsumerConfig,
    SendResult,
)
from pocketmq.errors import BrokerConnectionError, SendOutcomeUnknownError
from pocketmq.reliability.backend import LeaseStore, ReliabilityBackend
from pocketmq.reliability.backends.redis import RedisLeaseStore
from pocketmq.reliability.clock import FakeClock
from pocketmq.reliability.idempotent import IdempotentConsumer
from pocketmq.reliability.outbox import OutboxRelay
from pocketmq.reliability.resend import ResendScheduler
from pocketmq.reliability.stub import StubStatus
from pocketmq.testing import BrokerProcess, require_service

from ..reliability.chaos import (
    BrokerCounts,
    BrokerFaults,
    ChaosBusiness,
    ChaosConfig,
    ChaosResult,
    CrashingHandler,
    assert_exactly_once,
)
from ..reliability.conftest import close_test_backend, open_test_backend
from ..scratch import scratch_dir
from .conftest import FAST_BROKER

pytestmark = pytest.mark.integration

TOPIC = "orders"  # ChaosBusiness sends to "orders"
VOID = "chaos-void"  # "lost by the broker": stored where nobody reads


class FaultyProducer:
    """The outbox's sender: a real producer with seeded faults at the broker boundary."""

    def __init__(self, producer: Producer, rng: random.Random, faults: BrokerFaults) -> None:
        self.producer = producer
        self.rng = rng
        self.faults: BrokerFaults | None = faults
        self.counts = BrokerCounts()

    async def send(self, message: Message) -> SendResult:
        faults, roll = self.faults, self.rng.random()
        if faults is not None:
            if roll < faults.refuse:
                self.counts.refused += 1
                raise BrokerConnectionError("connection refused (injected)", address="chaos")
            roll -= faults.refuse
            if roll < faults.unknown_lost:
                self.counts.unknown += 1
                raise SendOutcomeUnknownError(
                    "timed out (injected)", message_id=message.message_id or ""
                )
            roll -= faults.unknown_lost
            if roll < faults.unknown_stored:
                await self.producer.send(message)
                self.counts.stored += 1
                self.counts.unknown += 1
                raise SendOutcomeUnknownError(
                    "stored, answer lost (injected)", message_id=message.message_id or ""
                )
            roll -= faults.unknown_stored
            if roll < faults.drop_after_store:
                lost = await self.producer.send(
                    Message(topic=VOID, body=message.body, message_id=message.message_id)
                )
                self.counts.dropped += 1
                return SendResult(
                    message_id=lost.message_id,
                    topic=TOPIC,
                    queue_id=0,
                    queue_offset=0,
                    broker_name=lost.broker_name,
                )
        result = await self.producer.send(message)
        self.counts.stored += 1
        if faults is not None and self.rng.random() < faults.duplicate:
            await self.producer.send(message)  # stored twice, same id
            self.counts.duplicated += 1
        return result


async def _run(
    broker: BrokerProcess,
    backend: ReliabilityBackend[Any],
    clock: FakeClock,
    config: ChaosConfig,
    leases: LeaseStore | None,
    forget: Any,
) -> ChaosResult:
    rng = random.Random(config.seed)
    business = ChaosBusiness(backend)
    await business.create()
    handle = CrashingHandler(business, rng, config.handler_crash_rate)

    listener = IdempotentConsumer(
        backend, handle, group="chaos-consumer", leases=leases, lease_ttl=config.lease_ttl
    )
    consumer_config = PushConsumerConfig(batch_size=8, concurrency=4, report_outcomes=False)
    try:
        async with (
            Producer(servers=broker.address) as producer,
            PushConsumer(
                "chaos-consumer", TOPIC, listener, servers=broker.address, config=consumer_config
            ),
        ):
            sender = FaultyProducer(producer, random.Random(config.seed + 1), BrokerFaults())
            relay = OutboxRelay(backend, sender, policy=config.policy)
            scheduler = ResendScheduler(
                backend, sender, group="chaos-consumer", policy=config.policy, alerts=()
            )
            order_ids = iter(range(1, 1_000_000))
            ids: list[str] = []
            for _ in range(config.producers - config.crashing_producers):
                ids += [
                    await business.place_order(next(order_ids))
                    for _ in range(config.messages_per_producer)
                ]
            await relay.run_once()
            for _ in range(config.crashing_producers):  # committed, then died before the relay ran
                ids += [
                    await business.place_order(next(order_ids))
                    for _ in range(config.messages_per_producer)
                ]
            total = len(ids)
            first_sends = sender.counts.stored + sender.counts.refused + sender.counts.unknown
            rounds = 0
            for rounds in range(1, config.max_rounds + 1):
                await asyncio.sleep(0.3)  # real deliveries and real retries happen meanwhile
                if forget is not None and handle.storm and rng.random() < config.forget_leases_rate:
                    await forget()
                await scheduler.run_once()
                confirmed = await backend.list_stubs(status=StubStatus.CONFIRMED, limit=total + 1)
                if len(confirmed) == total:
                    break
                if rounds == config.storm_rounds:
                    handle.storm = False
                    sender.faults = None
                clock.advance(config.step_seconds)
            await asyncio.sleep(0.5)  # let stragglers (duplicates in flight) arrive and be rejected
        attempts = sender.counts.stored + sender.counts.refused + sender.counts.unknown
        return ChaosResult(
            rounds=rounds,
            messages=total,
            handler_runs=handle.runs,
            committed=handle.committed,
            crashes=handle.crashes,
            broker=sender.counts,
            resends=attempts - first_sends,
            business_counts=await business.counts(),
        )
    finally:
        await business.drop()


@pytest.fixture(scope="module")
def chaos_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with (
        scratch_dir(tmp_path_factory, "chaos") as scratch,
        BrokerProcess(scratch, config=FAST_BROKER, grpc_port=None) as broker,
    ):
        asyncio.run(_prepare(broker.address))
        yield broker


async def _prepare(address: str) -> None:
    async with Admin(servers=address) as admin:
        await admin.create_topic(TOPIC, queues=4)
        await admin.create_topic(VOID, queues=1)
        await admin.create_group("chaos-consumer", max_retries=40)


def _check(result: ChaosResult) -> None:
    assert result.crashes > 0
    assert result.broker.dropped > 0
    assert result.broker.duplicated > 0
    assert result.broker.unknown > 0
    assert result.resends > 0


async def test_chaos_against_a_real_broker_sqlite(
    chaos_broker: BrokerProcess, tmp_path: Path
) -> None:
    clock = FakeClock()
    backend = await open_test_backend("sqlite", clock, tmp_path)
    try:
        result = await _run(chaos_broker, backend, clock, ChaosConfig(seed=21), None, None)
        await assert_exactly_once(backend, result)
        _check(result)
    finally:
        await close_test_backend(backend)


@pytest.mark.postgres
@pytest.mark.redis
async def test_chaos_against_a_real_broker_postgres_redis(
    chaos_broker: BrokerProcess, tmp_path: Path
) -> None:
    require_service("postgres")
    require_service("redis")
    import redis.asyncio as aioredis

    clock = FakeClock()
    backend = await open_test_backend("postgres", clock, tmp_path)
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    prefix = f"pocketmq:chaos:{random.randrange(1 << 30)}:"
    leases = RedisLeaseStore(client, prefix=prefix)

    async def forget() -> None:  # Redis loses its keys: eviction, failover, a careless FLUSHDB
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)

    try:
        result = await _run(
            chaos_broker, backend, clock, ChaosConfig(seed=22, lease_ttl=0.5), leases, forget
        )
        await assert_exactly_once(backend, result)
        _check(result)
    finally:
        await client.aclose()
        await close_test_backend(backend)
