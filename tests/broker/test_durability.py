"""The asyncio group-commit waiter: one store request per loop iteration, and a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pocketmq.broker.durability import DurabilityWaiter


class FakeStore:
    def __init__(self) -> None:
        self.requests: list[tuple[int, Callable[[bool], None]]] = []

    def when_durable(self, offset: int, callback: Callable[[bool], None]) -> None:
        self.requests.append((offset, callback))


async def test_waiters_of_one_iteration_share_one_request_for_the_highest_offset() -> None:
    store = FakeStore()
    waiter = DurabilityWaiter(store, flush_timeout=5)
    waits = [asyncio.ensure_future(waiter.wait(offset)) for offset in (100, 300, 200)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [offset for offset, _ in store.requests] == [300]
    store.requests[0][1](True)  # the flusher thread reports success
    assert await asyncio.gather(*waits) == [True, True, True]
    later = asyncio.ensure_future(waiter.wait(400))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [offset for offset, _ in store.requests] == [300, 400]
    store.requests[1][1](False)  # an fsync failure
    assert await later is False


async def test_a_flush_that_never_comes_times_out_as_not_durable() -> None:
    store = FakeStore()
    waiter = DurabilityWaiter(store, flush_timeout=0.05)
    assert await asyncio.wait_for(waiter.wait(10), 2) is False
    store.requests[0][1](True)  # late: changes nothing
