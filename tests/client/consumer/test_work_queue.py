"""The push consumer's work queue (client/consumer/work.py): FIFO, bounded, a pull's batches put
together, the puller woken only once the queue drained to half its bound, ``join`` after every
item was marked done, idle getters woken one at a time and each in turn while items remain, and
no wake-up lost to a cancelled waiter."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.client.consumer.hotpath import WorkQueue


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_items_come_out_in_order_and_a_getter_waits_for_them() -> None:
    queue: WorkQueue[int] = WorkQueue(4)
    getter = asyncio.ensure_future(queue.get())
    await _settle()
    assert not getter.done()
    await queue.put_many([1, 2, 3])
    assert await getter == 1
    assert [await queue.get(), await queue.get()] == [2, 3]


async def test_every_waiting_getter_gets_an_item_of_one_put() -> None:
    """Woken in turn, not at once: a listener that awaits still has a worker per batch."""
    queue: WorkQueue[int] = WorkQueue(8)
    getters = [asyncio.ensure_future(queue.get()) for _ in range(4)]
    await _settle()
    await queue.put_many([1, 2, 3])
    await _settle()
    assert [g.result() for g in getters[:3]] == [1, 2, 3]
    assert not getters[3].done()
    await queue.put_many([4])
    assert await getters[3] == 4


async def test_a_worker_that_takes_the_whole_put_costs_the_others_no_wake_up() -> None:
    """One idle worker is woken per put, the next only while items remain after it took its
    own: a woken worker that finds nothing waits again on a new future, which is counted
    (benchmarks.md, "The push consumer's client CPU per message")."""
    queue: WorkQueue[int] = WorkQueue(8)
    loop = asyncio.get_running_loop()
    waits = [0]
    create_future = loop.create_future

    def counted() -> asyncio.Future[None]:
        waits[0] += 1
        return create_future()

    async def worker() -> None:
        while True:
            item: int | None = await queue.get()
            while item is not None:  # a listener that never awaits: the rest in this turn
                item = queue.take()

    workers = [asyncio.ensure_future(worker()) for _ in range(4)]
    await _settle()
    loop.create_future = counted  # type: ignore[method-assign]
    try:
        await queue.put_many(range(8))
        await _settle()
    finally:
        del loop.create_future  # type: ignore[method-assign]
    assert len(queue) == 0
    # the first woken took all 8 and waits again; the second, woken by it, found nothing
    # (one per item put, as before, would have woken all four)
    assert waits[0] == 2
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)


async def test_a_full_queue_holds_the_putter_until_it_drained_to_half() -> None:
    queue: WorkQueue[int] = WorkQueue(4)
    await queue.put_many(range(4))  # at its bound: the next put waits
    putter = asyncio.ensure_future(queue.put_many([10, 11, 12]))
    await _settle()
    assert not putter.done()
    await queue.get()  # 3 left: above half, the putter sleeps on
    await _settle()
    assert not putter.done()
    await queue.get()  # 2 left: half the bound, the putter is woken and puts its whole pull
    await _settle()
    assert putter.done()
    assert len(queue) == 5  # bounded by the bound plus one pull
    assert [await queue.get() for _ in range(5)] == [2, 3, 10, 11, 12]


async def test_join_waits_until_every_item_is_done() -> None:
    queue: WorkQueue[str] = WorkQueue(8)
    await queue.put_many(["a", "b"])
    joined = asyncio.ensure_future(queue.join())
    await queue.get()
    queue.task_done()
    await _settle()
    assert not joined.done()
    await queue.get()
    queue.task_done()
    await _settle()
    assert joined.done()
    with pytest.raises(ValueError, match="more often"):
        queue.task_done()


async def test_a_cancelled_getter_passes_its_wake_up_on() -> None:
    queue: WorkQueue[int] = WorkQueue(8)
    first = asyncio.ensure_future(queue.get())
    second = asyncio.ensure_future(queue.get())
    await _settle()
    await queue.put(7)  # wakes the first getter ...
    first.cancel()  # ... which is cancelled before it runs: the second must get the item
    await _settle()
    assert first.cancelled()
    assert second.done()
    assert second.result() == 7


async def test_a_cancelled_putter_passes_its_wake_up_on() -> None:
    queue: WorkQueue[int] = WorkQueue(2)
    await queue.put_many([1, 2])
    first = asyncio.ensure_future(queue.put(3))
    second = asyncio.ensure_future(queue.put(4))
    await _settle()
    await queue.get()  # one left: half the bound, a putter is woken
    first.cancel()
    await _settle()
    assert first.cancelled()
    assert second.done()
    assert [await queue.get(), await queue.get()] == [2, 4]


async def test_take_gives_the_oldest_item_or_none_and_wakes_the_putter_at_half() -> None:
    queue: WorkQueue[int] = WorkQueue(4)
    assert queue.take() is None
    await queue.put_many(range(4))
    putter = asyncio.ensure_future(queue.put_many([10]))
    await _settle()
    assert queue.take() == 0  # 3 left: the putter sleeps on
    await _settle()
    assert not putter.done()
    assert queue.take() == 1  # 2 left, half the bound: woken
    await _settle()
    assert putter.done()
    assert [queue.take() for _ in range(4)] == [2, 3, 10, None]
    for _ in range(5):
        queue.task_done()
    await queue.join()


async def test_put_now_adds_without_waiting_where_has_room_says_it_may() -> None:
    """What a pull's answer handed on as it is read uses (client/consumer/pull.py): room is
    below the bound with no putter waiting (one waiting is not overtaken), and the items
    added wake an idle getter as ``put_many`` does."""
    queue: WorkQueue[int] = WorkQueue(4)
    getter = asyncio.ensure_future(queue.get())
    await _settle()
    assert queue.has_room()
    queue.put_now([1])
    await asyncio.sleep(0)
    assert getter.result() == 1
    queue.put_now([2, 3, 4, 5])
    assert not queue.has_room()  # at the bound
    putter = asyncio.ensure_future(queue.put_many([6]))
    await _settle()
    assert queue.take() == 2  # below the bound, but the putter still waits (above half)
    assert not queue.has_room()
    assert queue.take() == 3  # half: the putter is woken and puts
    await _settle()
    assert putter.done()
    assert [queue.take(), queue.take(), queue.take(), queue.take()] == [4, 5, 6, None]
    assert queue.has_room()
