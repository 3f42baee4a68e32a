"""Chaos: lost and duplicated messages, crashes on both sides, forgetful Redis: exactly once.

Every run must end with every stub CONFIRMED exactly once and every business effect applied
exactly once: counted by committed handler invocations, by rows in a table with a unique
constraint, and by rows in a ledger table without one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pocketmq.reliability.backends.memory import MemoryLeaseStore
from pocketmq.reliability.backends.redis import RedisLeaseStore
from pocketmq.reliability.clock import FakeClock

from .chaos import ChaosConfig, ChaosResult, assert_exactly_once, run_chaos
from .conftest import close_test_backend, open_test_backend


def assert_chaos_happened(result: ChaosResult) -> None:
    """Guard against a harness that quietly stopped injecting faults."""
    counts = result.broker
    assert result.crashes > 0
    assert counts.dropped > 0
    assert counts.duplicated > 0
    assert counts.unknown > 0
    assert counts.refused > 0
    assert result.resends > 0
    assert sum(result.handler_runs.values()) > result.messages  # crashes and races re-ran some


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("leases", ["memory-lease", "db-only"])
async def test_chaos_embedded(
    kind: str, leases: str, seed: int, clock: FakeClock, tmp_path: Path
) -> None:
    backend = await open_test_backend(kind, clock, tmp_path)
    lease_store = MemoryLeaseStore(clock=clock) if leases == "memory-lease" else None

    async def forget() -> None:
        if lease_store is not None:
            lease_store.expire_all()

    try:
        result = await run_chaos(
            backend,
            clock=clock,
            config=ChaosConfig(seed=seed),
            leases=lease_store,
            forget_leases=forget,
        )
        await assert_exactly_once(backend, result)
        assert_chaos_happened(result)
    finally:
        await close_test_backend(backend)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize(
    ("seed", "lease_ttl"),
    [(11, 60.0), (12, 0.002), (13, 60.0)],
    ids=["lease-60s", "lease-2ms", "lease-60s-b"],
)
async def test_chaos_postgres_redis(
    seed: int,
    lease_ttl: float,
    clock: FakeClock,
    tmp_path: Path,
    redis_client: Any,
    redis_prefix: str,
) -> None:
    backend = await open_test_backend("postgres", clock, tmp_path)
    leases = RedisLeaseStore(redis_client, prefix=redis_prefix)

    async def forget() -> None:  # Redis loses keys: eviction, failover, a careless FLUSHDB
        keys = [k async for k in redis_client.scan_iter(match=f"{redis_prefix}*")]
        if keys:
            await redis_client.delete(*keys)

    try:
        result = await run_chaos(
            backend,
            clock=clock,
            config=ChaosConfig(seed=seed, lease_ttl=lease_ttl),
            leases=leases,
            forget_leases=forget,
        )
        await assert_exactly_once(backend, result)
        assert_chaos_happened(result)
    finally:
        await forget()
        await close_test_backend(backend)


@pytest.mark.postgres
async def test_chaos_postgres_without_redis(clock: FakeClock, tmp_path: Path) -> None:
    backend = await open_test_backend("postgres", clock, tmp_path)
    try:
        result = await run_chaos(backend, clock=clock, config=ChaosConfig(seed=21), leases=None)
        await assert_exactly_once(backend, result)
        assert_chaos_happened(result)
    finally:
        await close_test_backend(backend)


@pytest.mark.mariadb
async def test_chaos_mariadb_without_redis(clock: FakeClock, tmp_path: Path) -> None:
    backend = await open_test_backend("mariadb", clock, tmp_path)
    try:
        config = ChaosConfig(seed=31, producers=3, messages_per_producer=15)
        result = await run_chaos(backend, clock=clock, config=config, leases=None)
        await assert_exactly_once(backend, result)
        assert_chaos_happened(result)
    finally:
        await close_test_backend(backend)
