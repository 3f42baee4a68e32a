"""The proxy's request merging (pocketmq/batching.py): one request in flight, the rest
ride in the next one, each caller gets exactly its own results."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.batching import Batcher, BatchSizes


async def _turns() -> None:
    """Let every ready task run (a submit, then the batcher's drain task)."""
    for _ in range(5):
        await asyncio.sleep(0)


class _Recorder:
    """A request that records its items, then waits for ``release``; a ``gated`` one waits for
    ``gate`` before it even records them (the batcher sees a request in flight meanwhile)."""

    def __init__(self, fail_on: int | None = None, gated: bool = False) -> None:
        self.calls: list[list[int]] = []
        self.release = asyncio.Event()
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self._fail_on = fail_on

    async def __call__(self, items: list[int]) -> list[int]:
        await self.gate.wait()
        self.calls.append(list(items))
        await self.release.wait()
        if self._fail_on is not None and self._fail_on in items:
            raise RuntimeError("broker said no")
        return [item * 10 for item in items]


async def test_an_idle_batcher_sends_at_once_and_merges_what_waits_meanwhile() -> None:
    call = _Recorder()
    batcher: Batcher[int, int] = Batcher(call, max_batch=100)
    first = asyncio.create_task(batcher.submit([1]))
    await _turns()
    assert call.calls == [[1]]  # nothing in flight: no waiting for company
    later = [asyncio.create_task(batcher.submit([n, n + 1])) for n in (2, 4, 6)]
    await _turns()
    assert call.calls == [[1]]  # one request at a time
    call.release.set()
    assert await first == [10]
    assert [await task for task in later] == [[20, 30], [40, 50], [60, 70]]
    assert call.calls == [[1], [2, 3, 4, 5, 6, 7]]  # the three waiting callers in one request


async def test_a_batch_never_exceeds_its_limit_and_keeps_callers_whole() -> None:
    call = _Recorder(gated=True)
    call.release.set()
    batcher: Batcher[int, int] = Batcher(call, max_batch=4)
    tasks = [asyncio.create_task(batcher.submit([n, n, n])) for n in range(4)]
    await _turns()
    call.gate.set()
    results = [await task for task in tasks]
    assert results == [[n * 10] * 3 for n in range(4)]
    assert all(len(items) <= 4 for items in call.calls[1:])
    assert [len(items) for items in call.calls] == [3, 3, 3, 3]


async def test_a_failed_request_fails_every_caller_in_it_and_the_next_batch_still_runs() -> None:
    call = _Recorder(fail_on=2)
    batcher: Batcher[int, int] = Batcher(call, max_batch=100)
    first = asyncio.create_task(batcher.submit([1]))
    await _turns()
    doomed = [asyncio.create_task(batcher.submit([n])) for n in (2, 3)]
    call.release.set()
    assert await first == [10]
    for task in doomed:
        with pytest.raises(RuntimeError, match="broker said no"):
            await task
    assert await batcher.submit([5]) == [50]


async def test_a_batch_stays_within_its_byte_budget_but_a_large_caller_goes_whole() -> None:
    call = _Recorder(gated=True)
    call.release.set()
    # items weigh their own value in bytes; the budget is 10
    batcher: Batcher[int, int] = Batcher(call, max_batch=100, max_bytes=10, size=lambda n: n)
    first = asyncio.create_task(batcher.submit([1]))
    await _turns()
    waiting = [asyncio.create_task(batcher.submit(items)) for items in ([4], [5], [3], [12])]
    await _turns()
    call.gate.set()
    await first
    assert [await task for task in waiting] == [[40], [50], [30], [120]]
    # 4+5 fit, 3 would pass 10, so it starts the next batch; 12 alone is over but goes whole
    assert call.calls == [[1], [4, 5], [3], [12]]


async def test_each_merged_request_is_measured_for_the_proxys_metrics() -> None:
    """``pocketmq_proxy_batch_size``: one observation per request the broker gets, of its size."""
    call = _Recorder()
    call.release.set()
    sizes = BatchSizes()
    batcher: Batcher[int, int] = Batcher(
        call, max_batch=100, observe=lambda n: sizes.observe("send", n)
    )
    await batcher.submit([1])
    call.release.clear()
    first = asyncio.create_task(batcher.submit([2]))
    await _turns()
    rest = [asyncio.create_task(batcher.submit(list(range(10 * n, 10 * n + 3)))) for n in (1, 2)]
    await _turns()
    call.release.set()
    await asyncio.gather(first, *rest)
    assert [len(c) for c in call.calls] == [1, 1, 6]
    assert sizes.sums == {"send": 8}
    assert sizes.counts["send"][:4] == [2, 0, 0, 1]  # two of <= 1, one of <= 8 (5 to 8)
    assert sum(sizes.counts["send"]) == 3


async def test_a_lone_request_leaves_from_its_callers_task_without_waiting() -> None:
    calls: list[list[int]] = []

    async def call(items: list[int]) -> list[int]:
        calls.append(list(items))
        return [item * 10 for item in items]

    batcher: Batcher[int, int] = Batcher(call, max_batch=10)
    submit = batcher.submit([1])
    with pytest.raises(StopIteration) as done:
        submit.send(None)  # one step: answered without suspending (no task, no loop turn)
    assert done.value.value == [10]
    await _turns()
    calls.clear()
    # what arrives in the loop turn of a lone request waits for it and rides in the next batch
    answers = await asyncio.gather(*(batcher.submit([n]) for n in (1, 2, 3)))
    assert answers == [[10], [20], [30]]
    assert calls == [[1], [2, 3]]
