"""Integration fixtures: real ``pocketmq serve`` processes on loopback.

One broker per test module (starting a process costs ~1 s); every test uses its own topic and
group names, so tests in a module do not see each other's messages. Delay levels are shortened
to tenths of a second so retry paths run in test time.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import Admin
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker

FAST_LEVELS = [round(0.1 * n, 1) for n in range(1, 19)]
FAST_BROKER: dict[str, dict[str, Any]] = {
    "broker": {
        "delay_levels": FAST_LEVELS,
        "state_persist_interval": 0.2,
        # a loaded 2-core CI machine stalls the broker's loop >200 ms at times; refusing sends
        # then is flow control's job (tests/broker/test_flow_control.py), not these tests'
        "max_queue_wait": 5.0,
    },
    "store": {"flush_interval": 0.05, "checkpoint_interval": 0.2},
}

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{int(time.time() * 1000) % 100000}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_broker(tmp_path_factory, "broker", config=FAST_BROKER, grpc_port=None) as process:
        yield process


@pytest.fixture
def names() -> Callable[[str], str]:
    return unique


async def create(address: str, *, topic: str | None = None, group: str | None = None,
                 queues: int = 4, **group_options: Any) -> None:  # fmt: skip
    async with Admin(servers=address) as admin:
        if topic:
            await admin.create_topic(topic, queues=queues)
        if group:
            await admin.create_group(group, **group_options)


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0,
                     interval: float = 0.05) -> None:  # fmt: skip
    """Wait until ``check()`` is true (fails the test after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def data_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir / "data"
