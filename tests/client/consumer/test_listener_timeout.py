"""The consume timeout: one watchdog per consumer stops listeners that run too long."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pocketmq.client.consumer.config import ConsumeContext
from pocketmq.client.consumer.hotpath import ListenerCall
from pocketmq.client.message import ConsumeStatus, MessageView

VIEWS = [MessageView(message_id="M1", topic="t", queue_id=0, queue_offset=0, body=b"")]
CONTEXT = ConsumeContext(ack_index=0, queue=("t", "b", 0))


async def test_a_listener_past_the_timeout_is_stopped_and_judged_a_timeout() -> None:
    stopped = asyncio.Event()

    async def slow(views: list[MessageView]) -> ConsumeStatus:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return ConsumeStatus.SUCCESS

    call = ListenerCall(slow, consume_timeout=0.2)
    began = time.monotonic()
    verdict = await call(VIEWS, CONTEXT)
    took = time.monotonic() - began
    assert (verdict.status, verdict.outcome) == (ConsumeStatus.RECONSUME_LATER, "TIMEOUT")
    assert stopped.is_set()
    assert 0.2 <= took < 2.0
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_calls_within_the_timeout_finish_and_the_watchdog_stops_when_idle() -> None:
    async def quick(views: list[MessageView]) -> ConsumeStatus:
        await asyncio.sleep(0.01)
        return ConsumeStatus.SUCCESS

    call = ListenerCall(quick, consume_timeout=0.2)
    verdicts = await asyncio.gather(*(call(VIEWS, CONTEXT) for _ in range(50)))
    assert {v.outcome for v in verdicts} == {"SUCCESS"}
    await asyncio.sleep(0.1)  # one watchdog round: nothing running, so it ends
    assert call._watchdog is None
    assert call._deadlines == {}
    assert (await call(VIEWS, CONTEXT)).outcome == "SUCCESS"  # and starts again when needed


async def test_one_watchdog_serves_a_stream_of_listeners_that_return_at_once() -> None:
    """A listener that returns without waiting finishes before its watchdog first runs; the
    watchdog must outlive that moment, or every message starts a task of its own (it did:
    ~1.8 µs per message, more than the rest of the call)."""

    async def instant(views: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.SUCCESS

    call = ListenerCall(instant, consume_timeout=10.0)
    task = asyncio.current_task()
    await call(VIEWS, CONTEXT, task)
    watchdog = call._watchdog
    for _ in range(20):
        await asyncio.sleep(0)  # the loop turns between messages, as in a consumer
        assert (await call(VIEWS, CONTEXT, task)).outcome == "SUCCESS"
    assert watchdog is not None
    assert call._watchdog is watchdog


async def test_only_the_late_call_is_stopped_among_concurrent_ones() -> None:
    async def listener(views: list[MessageView]) -> ConsumeStatus:
        await asyncio.sleep(5 if views[0].message_id == "late" else 0.05)
        return ConsumeStatus.SUCCESS

    call = ListenerCall(listener, consume_timeout=0.3)
    late = [MessageView(message_id="late", topic="t", queue_id=0, queue_offset=1, body=b"")]
    slow, fast = await asyncio.gather(call(late, CONTEXT), call(VIEWS, CONTEXT))
    assert (slow.outcome, fast.outcome) == ("TIMEOUT", "SUCCESS")


async def test_a_sync_listener_past_the_timeout_is_judged_a_timeout() -> None:
    release = threading.Event()

    def blocking(views: list[MessageView]) -> ConsumeStatus:
        release.wait(10)
        return ConsumeStatus.SUCCESS

    call = ListenerCall(blocking, consume_timeout=0.2)
    try:
        verdict = await call(VIEWS, CONTEXT)
    finally:
        release.set()  # the worker thread cannot be stopped: let it end
    assert verdict.outcome == "TIMEOUT"


async def test_a_cancelled_consumer_is_cancelled_not_timed_out() -> None:
    async def slow(views: list[MessageView]) -> ConsumeStatus:
        await asyncio.sleep(30)
        return ConsumeStatus.SUCCESS

    call = ListenerCall(slow, consume_timeout=10)
    task = asyncio.create_task(call(VIEWS, CONTEXT))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):  # a cancelled call stays cancelled
        await task


async def test_a_close_that_meets_an_expiry_still_cancels() -> None:
    """The watchdog's cancel and a closing consumer's cancel land together: the worker must end."""

    async def slow(views: list[MessageView]) -> ConsumeStatus:
        await asyncio.sleep(30)
        return ConsumeStatus.SUCCESS

    call = ListenerCall(slow, consume_timeout=10)
    task = asyncio.create_task(call(VIEWS, CONTEXT))
    await asyncio.sleep(0.05)
    call._expired.add(task)  # the watchdog's expiry ...
    task.cancel()
    task.cancel()  # ... and the consumer's close, in the same turn
    with pytest.raises(asyncio.CancelledError):  # not swallowed as a timeout
        await task
    assert call._expired == set()
