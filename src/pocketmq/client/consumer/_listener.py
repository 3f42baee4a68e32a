"""Calling the application's listener, and turning whatever it does into a verdict.

Returning ``RECONSUME_LATER``, returning ``None`` or anything that is not a
:class:`ConsumeStatus`, raising, or running past ``consume_timeout`` all count as a failure
(docs/semantics.md, "Consumer retry, delays and dead letters"); the verdict also names the
outcome and the error text the attempt history records. Async listeners run on the loop, sync
ones in a worker thread, so a blocking listener never stalls pulling — unless the consumer is
told its plain function never blocks (``listener_thread=False``): it is then called inline, with
no thread, task, future or await per message.

The consume timeout is kept by one watchdog per consumer, not a timer per call: a timer per
message cost a sixth of a default consumer's CPU. The watchdog looks every tenth of the timeout
(at most every second), so a listener is stopped between ``consume_timeout`` and 1.1 times it
(docs/semantics.md, "Consumer retry, delays and dead letters").
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, cast

from pocketmq.client.consumer.config import ConsumeContext, Listener
from pocketmq.client.message import ConsumeStatus, MessageView

__all__ = ["ListenerCall", "Verdict"]

log = logging.getLogger("pocketmq.client")


class Verdict(NamedTuple):
    """A listener call's result: the status, the outcome name for the attempt history
    (``SUCCESS``, ``RECONSUME_LATER``, ``EXCEPTION``, ``TIMEOUT``) and an error text."""

    status: ConsumeStatus
    outcome: str
    error: str


_VERDICTS = {status: Verdict(status, status.value, "") for status in ConsumeStatus}
_SUCCESS = ConsumeStatus.SUCCESS
_SUCCEEDED = _VERDICTS[_SUCCESS]


class ListenerCall:
    """The listener with what is known about it: async or not, wanting a context or not, and
    where a plain function runs (a worker thread, or inline on the loop when the consumer was
    told it never blocks: ``PushConsumerConfig.listener_thread=False``)."""

    def __init__(
        self, listener: Listener, consume_timeout: float, *, in_thread: bool = True
    ) -> None:
        self._listener = listener
        self._timeout = consume_timeout
        self._deadlines: dict[asyncio.Task[Any], float] = {}  # running calls
        self._expired: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        # the consumer's loop, found once: asyncio.get_running_loop() makes a getpid() system
        # call on Python 3.11, which a profile put at 7 % of a default consumer's CPU
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async = _is_async(listener)
        self._warned_none = False
        self.inline = not self._async and not in_thread
        """A plain function called on the loop, without a thread or an await (call_inline)."""
        try:
            wants_context = len(inspect.signature(listener).parameters) >= 2
        except (TypeError, ValueError):
            wants_context = False
        self.wants_context = wants_context
        """Whether the listener takes a :class:`ConsumeContext`: a caller makes none for one
        that does not (nothing could change it)."""

    async def __call__(
        self,
        views: list[MessageView],
        context: ConsumeContext | None,
        task: asyncio.Task[Any] | None = None,
    ) -> Verdict:
        """Call the listener with ``views`` (and ``context``) and judge what it did. ``task``:
        the caller's own task when it knows it (finding it costs more than the rest of a
        call's timeout bookkeeping on Python 3.11). ``context`` may be None only for a
        listener that does not take one (:attr:`wants_context`)."""
        if self.inline:
            return self.call_inline(views, context)
        args: tuple[Any, ...] = (views, context) if self.wants_context else (views,)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if task is None:
            task = asyncio.current_task(loop)
        if self._async:
            pending = cast(Awaitable[ConsumeStatus | None], self._listener(*args))
        else:
            call = cast(Callable[..., ConsumeStatus | None], self._listener)
            pending = asyncio.to_thread(call, *args)
        if task is None:  # not in a task (no watchdog can cancel it): wait without a limit
            try:
                return self._judge(await pending)
            except Exception as exc:
                return _raised(exc)
        # the watchdog (below) cancels the task of a call past its deadline
        # time.monotonic(), not loop.time(): the same clock on asyncio's loop, without a
        # Python method call per message (docs/benchmarks.md, "The push consumer's client CPU
        # per message"); the watchdog reads the same clock
        self._deadlines[task] = time.monotonic() + self._timeout
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch(), name="pocketmq-consume-timeout")
        try:
            result = await pending
        except asyncio.CancelledError:
            if task not in self._expired or task.cancelling() > 1:
                raise  # cancelled by someone else (too): a closing consumer stays cancelled
            return _timed_out(self._timeout)
        except Exception as exc:
            return _raised(exc)
        finally:
            del self._deadlines[task]
            if task in self._expired:
                self._expired.discard(task)
                task.uncancel()
        return self._judge(result)

    def call_inline(self, views: list[MessageView], context: ConsumeContext | None) -> Verdict:
        """Call a plain function listener here and now. It cannot be stopped, so a call that
        ran past the consume timeout is judged a timeout when it returns (its messages are
        retried whatever it returned)."""
        call = cast(Callable[..., ConsumeStatus | None], self._listener)
        began = time.monotonic()
        try:
            result = call(views, context) if self.wants_context else call(views)
        except Exception as exc:
            return _raised(exc)
        if time.monotonic() - began > self._timeout:
            return _timed_out(self._timeout)
        return self._judge(result)

    def _judge(self, result: object) -> Verdict:
        """``_judge``, saying once per consumer that ``None`` is a failure: a listener that
        forgets to return a status has every message sent back and redelivered, silently
        (RocketMQ's concurrent consume service logs each null status as a warning)."""
        if result is None and not self._warned_none:
            self._warned_none = True
            log.warning(
                "listener returned None, which is a failure: its messages are retried; "
                "return ConsumeStatus.SUCCESS for consumed messages (logged once)"
            )
        return _judge(result)

    async def _watch(self) -> None:
        """Cancel the calls past their deadline; stop after a tick with no call running (not
        sooner: a listener that returns at once would otherwise start a new watchdog task for
        every message, which cost more than the rest of the call)."""
        every = min(1.0, self._timeout / 10)
        try:
            while True:
                await asyncio.sleep(every)
                if not self._deadlines:
                    return
                now = time.monotonic()
                for task, deadline in list(self._deadlines.items()):
                    if deadline <= now and task not in self._expired:
                        self._expired.add(task)
                        task.cancel()
        finally:
            self._watchdog = None


def _judge(result: object) -> Verdict:
    """What the listener returned, as a verdict (anything but a status is a failure)."""
    if result is _SUCCESS:  # nearly every call: no dictionary lookup, whose hash of an enum
        return _SUCCEEDED  # member is a Python-level Enum.__hash__ call (benchmarks.md)
    if isinstance(result, ConsumeStatus):
        return _VERDICTS[result]
    if result is not None:
        log.warning("listener returned %r, not a ConsumeStatus; retrying the batch", result)
        return Verdict(
            ConsumeStatus.RECONSUME_LATER, "RECONSUME_LATER", f"listener returned {result!r}"
        )
    return Verdict(ConsumeStatus.RECONSUME_LATER, "RECONSUME_LATER", "listener returned None")


def _raised(exc: Exception) -> Verdict:
    log.error("listener raised; the batch will be retried", exc_info=exc)
    return Verdict(ConsumeStatus.RECONSUME_LATER, "EXCEPTION", f"{type(exc).__name__}: {exc}")


def _timed_out(timeout: float) -> Verdict:
    log.warning("listener ran past the consume timeout (%.0fs)", timeout)
    return Verdict(ConsumeStatus.RECONSUME_LATER, "TIMEOUT", "consume timeout exceeded")


def _is_async(listener: Listener) -> bool:
    if inspect.iscoroutinefunction(listener):
        return True
    call = getattr(listener, "__call__", None)  # noqa: B004 - an object with async __call__
    return call is not None and inspect.iscoroutinefunction(call)
