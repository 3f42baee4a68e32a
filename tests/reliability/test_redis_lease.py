"""The Redis lease store against a real Redis (127.0.0.1:6379, db 0, a unique key prefix)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from pocketmq.client import ConsumeStatus, MessageView
from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.backend import Transaction
from pocketmq.reliability.backends.redis import RedisLeaseStore
from pocketmq.reliability.backends.sql import SqlBackend
from pocketmq.reliability.idempotent import ConsumeOutcome, IdempotentConsumer

pytestmark = pytest.mark.redis


async def test_acquire_is_exclusive_and_expires(redis_client: Any, redis_prefix: str) -> None:
    leases = RedisLeaseStore(redis_client, prefix=redis_prefix)
    token = await leases.acquire("g", "M1", 0.2)
    assert token is not None
    assert await redis_client.get(f"{redis_prefix}g:M1") == token.encode()
    assert 0 < await redis_client.pttl(f"{redis_prefix}g:M1") <= 200
    assert await leases.acquire("g", "M1", 5) is None
    assert await leases.acquire("other-group", "M1", 5) is not None
    await asyncio.sleep(0.3)
    assert await leases.acquire("g", "M1", 5) is not None


async def test_release_only_by_the_holder(redis_client: Any, redis_prefix: str) -> None:
    leases = RedisLeaseStore(redis_client, prefix=redis_prefix)
    first = await leases.acquire("g", "M1", 0.05)
    assert first is not None
    await asyncio.sleep(0.1)  # the first holder's lease ran out ...
    second = await leases.acquire("g", "M1", 5)
    assert second is not None
    assert not await leases.release("g", "M1", first)  # ... so it must not delete the new one
    assert await redis_client.exists(f"{redis_prefix}g:M1") == 1
    assert await leases.release("g", "M1", second)
    assert await redis_client.exists(f"{redis_prefix}g:M1") == 0


async def test_default_key_layout_and_bad_ttl(redis_client: Any) -> None:
    leases = RedisLeaseStore(redis_client)
    assert leases.key("billing", "ABC") == "pocketmq:idem:billing:ABC"
    with pytest.raises(InvalidArgumentError):
        await leases.acquire("g", "M", 0)


async def test_from_url_owns_its_client(redis_prefix: str) -> None:
    from pocketmq.testing.services import require_service

    require_service("redis")
    leases = RedisLeaseStore.from_url(prefix=redis_prefix)
    try:
        token = await leases.acquire("g", "M", 1)
        assert token is not None
        assert await leases.release("g", "M", token)
    finally:
        await leases.aclose()


@pytest.mark.postgres
async def test_consumer_with_redis_and_postgres(
    redis_client: Any, redis_prefix: str, clock: Any, tmp_path: Any
) -> None:
    from .conftest import close_test_backend, open_test_backend

    backend = await open_test_backend("postgres", clock, tmp_path)
    assert isinstance(backend, SqlBackend)
    try:
        runs: Counter[str] = Counter()
        gate = asyncio.Event()

        async def handle(message: MessageView, tx: Transaction) -> None:
            runs[message.message_id] += 1
            await gate.wait()

        leases = RedisLeaseStore(redis_client, prefix=redis_prefix)
        consumer = IdempotentConsumer(backend, handle, group="billing", leases=leases)
        msg = MessageView(message_id="M1", topic="t", queue_id=0, queue_offset=0, body=b"")
        first = asyncio.create_task(consumer.consume(msg))
        await asyncio.sleep(0.2)
        # a concurrent duplicate bounces off the lease instead of waiting on the row lock
        assert await consumer.consume(msg) is ConsumeOutcome.BUSY
        gate.set()
        assert await first is ConsumeOutcome.HANDLED
        await redis_client.delete(leases.key("billing", "M1"))  # Redis forgets early
        assert await consumer([msg]) is ConsumeStatus.SUCCESS
        assert runs == Counter({"M1": 1})
    finally:
        await close_test_backend(backend)
