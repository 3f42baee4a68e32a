"""A plain function listener called inline (``PushConsumerConfig(listener_thread=False)``): on the
loop's thread, without a thread hop, and judged exactly as a threaded one — its status, an
exception, ``None``, a context's ``ack_index`` — with the consume timeout judged when it returns
(docs/semantics.md, "Consumer retry, delays and dead letters")."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pocketmq.client.consumer.config import ConsumeContext
from pocketmq.client.consumer.hotpath import ListenerCall
from pocketmq.client.message import ConsumeStatus, MessageView

VIEWS = [MessageView(message_id="M1", topic="t", queue_id=0, queue_offset=0, body=b"")]


def _context() -> ConsumeContext:
    return ConsumeContext(ack_index=0, queue=("t", "b", 0))


async def test_an_inline_listener_runs_on_the_loop_thread_and_its_status_counts() -> None:
    threads: list[int] = []

    def listener(views: list[MessageView]) -> ConsumeStatus:
        threads.append(threading.get_ident())
        return ConsumeStatus.RECONSUME_LATER

    call = ListenerCall(listener, consume_timeout=5, in_thread=False)
    assert call.inline
    verdict = await call(VIEWS, _context())
    assert verdict == (ConsumeStatus.RECONSUME_LATER, "RECONSUME_LATER", "")
    assert call.call_inline(VIEWS, _context()).status is ConsumeStatus.RECONSUME_LATER
    assert threads == [threading.get_ident()] * 2
    assert call._watchdog is None  # nothing to stop: no watchdog task, no deadline kept


async def test_a_threaded_listener_still_runs_in_a_worker_thread() -> None:
    threads: list[int] = []

    def listener(views: list[MessageView]) -> ConsumeStatus:
        threads.append(threading.get_ident())
        return ConsumeStatus.SUCCESS

    call = ListenerCall(listener, consume_timeout=5)  # the default: in_thread=True
    assert not call.inline
    assert (await call(VIEWS, _context())).outcome == "SUCCESS"
    assert threads != [threading.get_ident()]


def test_an_inline_listener_that_raises_or_returns_none_is_a_failure() -> None:
    def raising(views: list[MessageView]) -> ConsumeStatus:
        raise ValueError("bad row")

    def silent(views: list[MessageView]) -> None:
        return None

    raised = ListenerCall(raising, 5, in_thread=False).call_inline(VIEWS, _context())
    assert raised == (ConsumeStatus.RECONSUME_LATER, "EXCEPTION", "ValueError: bad row")
    none = ListenerCall(silent, 5, in_thread=False).call_inline(VIEWS, _context())
    assert none == (ConsumeStatus.RECONSUME_LATER, "RECONSUME_LATER", "listener returned None")


def test_an_inline_listener_past_the_timeout_is_judged_a_timeout_when_it_returns() -> None:
    def slow(views: list[MessageView]) -> ConsumeStatus:
        time.sleep(0.3)
        return ConsumeStatus.SUCCESS

    verdict = ListenerCall(slow, 0.2, in_thread=False).call_inline(VIEWS, _context())
    assert verdict == (ConsumeStatus.RECONSUME_LATER, "TIMEOUT", "consume timeout exceeded")


def test_an_inline_listener_gets_the_context_and_may_move_the_ack_index() -> None:
    def partial(views: list[MessageView], context: ConsumeContext) -> ConsumeStatus:
        context.ack_index = -1  # nothing of the batch succeeded after all
        return ConsumeStatus.SUCCESS

    context = _context()
    verdict = ListenerCall(partial, 5, in_thread=False).call_inline(VIEWS, context)
    assert verdict.status is ConsumeStatus.SUCCESS
    assert context.ack_index == -1


def test_an_async_listener_is_never_inline() -> None:
    async def listener(views: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.SUCCESS

    assert not ListenerCall(listener, 5, in_thread=False).inline


async def test_a_listeners_own_timeout_error_is_an_exception_not_the_consume_timeout() -> None:
    async def listener(views: list[MessageView]) -> ConsumeStatus:
        async with asyncio.timeout(0):  # the application's own deadline, well inside 900 s
            await asyncio.sleep(1)
        return ConsumeStatus.SUCCESS

    verdict = await ListenerCall(listener, 900)(VIEWS, _context())
    assert (verdict.outcome, verdict.error) == ("EXCEPTION", "TimeoutError: ")


async def test_a_listener_returning_none_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a listener that only counts and returns nothing fails every message: each is sent back
    # and redelivered, at ten times the broker's work of a success — say so, once
    def counting(views: list[MessageView]) -> None:
        return None

    async def counting_async(views: list[MessageView]) -> None:
        return None

    for call in (
        ListenerCall(counting, 5, in_thread=False),
        ListenerCall(counting, 5),
        ListenerCall(counting_async, 5),
    ):
        caplog.clear()
        for _ in range(3):
            assert (await call(VIEWS, _context())).outcome == "RECONSUME_LATER"
        warned = [r for r in caplog.records if "returned None" in r.getMessage()]
        assert [r.levelname for r in warned] == ["WARNING"]
