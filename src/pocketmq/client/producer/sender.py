"""The sender: the one retry loop for everything a producer asks of a broker.

Plain sends, half messages, transaction ends, and a push consumer's send-backs and re-sends to
its retry topic all go through :meth:`Sender.run`; what differs between them is in their handlers
(:mod:`pocketmq.client.producer.handlers`). The loop's rules (docs/semantics.md, "Producer"):

- every attempt fits in one overall budget, ``send_timeout`` (3 s), checked before each attempt;
  at most ``retries + 1`` attempts;
- flow control (TOO_MANY_REQUESTS) is waited out with :class:`~pocketmq.client.backoff.Backoff`,
  whose schedule starts at the first refusal: time spent in the refused attempt counts towards
  the wait, and an attempt made while backing off may run until the schedule's attempt
  deadline;
- everything else the handler allows is retried at once, on another broker when it asks so;
- a broker that left a send unanswered is **suspect** (RocketMQ's producers isolate a failing
  broker): a send about to go to a suspect address asks for the route first, and a send waiting
  on any broker longer than :data:`WATCH_AFTER` watches its topic's route (one shared fetch every
  :data:`NO_MASTER_POLL`) and gives up waiting the moment the group names another master or none
  — a frozen master is left for the group's new one within a poll of the election
  (docs/replication.md §8).

The sender also counts what it did, for :class:`~pocketmq.client.producer.ProducerStatistics`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pocketmq.client.connection import SlowWatch, clock_of
from pocketmq.client.message import SendResult
from pocketmq.client.pool import ConnectionPool
from pocketmq.client.producer.config import ProducerConfig, ProducerStatistics
from pocketmq.client.producer.handlers import (
    AttemptFailed,
    Failure,
    Next,
    Request,
    SendMessages,
    with_queue,
)
from pocketmq.client.producer.selector import QueueSelector
from pocketmq.client.routes import QueueRef, Route, RouteCache
from pocketmq.errors import (
    BrokerConnectionError,
    BrokerError,
    PocketMQError,
    ProtocolError,
    RequestTimeoutError,
    SendOutcomeUnknownError,
)
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["Sender"]

R = TypeVar("R")

NO_MASTER_POLL = 0.2
"""How often a send waiting for a group's new master asks for the route again (seconds)."""
WATCH_AFTER = 0.5
"""A send unanswered this long starts watching its topic's route (seconds)."""
SUSPECT_SECONDS = 30.0
"""How long an address that left a send unanswered stays suspect, unless it answers."""


class Sender:
    """Sends requests to brokers with retries, over a client's connection pool and routes.

    A :class:`~pocketmq.client.Producer` has one; the transaction producer uses its producer's
    sender for half messages and transaction ends, and a push consumer has one without retries
    for handing failed messages back.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        routes: RouteCache,
        config: ProducerConfig,
        rng: random.Random | None = None,
    ) -> None:
        self.pool = pool
        self.routes = routes
        self.config = config
        self._rng = rng or random.Random()
        self.selector = QueueSelector(self._rng)
        self._fifo_locks: dict[str, asyncio.Lock] = {}
        self._sent = self._failed = self._retries = self._backoffs = 0
        self._unknown = self._batches = 0
        self._suspects: dict[str, float] = {}  # address -> until (monotonic)
        self._watchers: set[asyncio.Task[None]] = set()
        # the running loop's clock, read without a Python frame where it can be (clock_of)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: Callable[[], float] = time.monotonic

    # -- the requests producers make ------------------------------------------------------

    def send(
        self, topic: str, wires: list[w.InboundMessage], *, group: str | None = None
    ) -> Coroutine[Any, Any, list[SendResult]]:
        """Store ``wires`` (messages of ``topic``) as one request (await the result);
        ``group`` marks FIFO messages, whose sends leave one at a time, in call order. A plain
        function handing back :meth:`run`'s coroutine: one coroutine less per send, created,
        passed through at each resumption and freed (docs/benchmarks.md, "A lone send, both
        sides")."""
        request = SendMessages(topic, wires, self.config.group, group)  # positional: cheaper
        if group:
            return self._send_in_order(request, group)
        return self.run(request)

    async def _send_in_order(self, request: SendMessages, group: str) -> list[SendResult]:
        """A FIFO send: one of ``group`` at a time, in call order."""
        lock = self._fifo_locks.setdefault(group, asyncio.Lock())
        async with lock:
            return await self.run(request)

    async def send_to(self, queue: QueueRef, wire: w.InboundMessage) -> SendResult:
        """Store ``wire`` in one given queue (a consumer's re-send to its retry topic)."""
        request = SendMessages(wire.topic, [wire], producer_group=self.config.group, queue=queue)
        [result] = await self.run(request)
        return result

    async def send_oneway(self, wire: w.InboundMessage, group: str | None) -> None:
        """Write the send and forget it: no answer, no retry (the message may be lost)."""
        route = await self.routes.get(wire.topic)
        queue = self.selector.pick(route, group, set())
        connection = await self.pool.get(queue.address)
        connection.oneway(
            RequestCode.SEND,
            w.SendRequest([with_queue(wire, queue.queue_id)], self.config.group),
        )
        self._sent += 1

    # -- the loop -------------------------------------------------------------------------

    async def run(self, request: Request[R]) -> R:
        """Make ``request`` until it succeeds or its handler, the attempts or the time say
        stop; raises the handler's :meth:`~Request.give_up` error then. Route lookups that
        fail raise at once: without a route there is nothing to retry."""
        config = self.config
        clock = self._clock if asyncio.get_running_loop() is self._loop else self._new_clock()
        started = clock()
        deadline = started + config.send_timeout
        counted = request.messages
        schedule = None  # created at the first flow-control refusal
        next_retry_at = 0.0
        avoid: set[str] = set()
        refresh = False  # ask for the route again before the next attempt
        unknown = False
        last: AttemptFailed | None = None
        retry_at: float | None = None
        for attempt in range(config.retries + 1):
            if retry_at is not None:  # flow control: wait out the backoff deadline
                wait = min(retry_at, deadline) - clock()
                if wait > 0:
                    await asyncio.sleep(wait)
            now = clock() if attempt else started  # nothing ran in between
            if now >= deadline:
                break
            if attempt and counted:
                self._retries += 1
            timeout = deadline - now
            if schedule is not None:
                next_retry_at, attempt_deadline = schedule.start_attempt(now)
                timeout = min(deadline, attempt_deadline) - now
            queue = request.fixed
            if queue is None:
                route = self.routes.cached(request.topic)
                if route is None or not route.writable or refresh:
                    try:
                        route = await self._writable_route(request.topic, deadline)
                    except BrokerConnectionError:
                        if route is None:
                            raise
                    refresh = False
                queue = self.selector.pick(route, request.group, avoid)
                if self._suspects and self._suspected(queue.address):
                    queue = await self._repick(request, queue, avoid)
            try:
                response = await self._exchange(request, queue, timeout)
                if counted:
                    self._batches += 1
                result = request.outcome(response, queue)
            except AttemptFailed as failure:
                last = failure
                unknown = unknown or failure.kind is Failure.UNKNOWN
                retry_at = None
                step = request.next_step(failure, attempt)
                if step is Next.STOP:
                    break
                if step is Next.REFRESH_ROUTE:
                    self.routes.invalidate(request.topic)
                elif step is Next.BACK_OFF:
                    if counted:
                        self._backoffs += 1
                    if schedule is None:  # the first attempt's deadline: its start + 1 s
                        schedule = config.backoff.schedule(self._rng)
                        next_retry_at, _ = schedule.start_attempt(started if attempt == 0 else now)
                    retry_at = next_retry_at
                elif step is Next.ELSEWHERE or step is Next.ISOLATE:
                    avoid.add(queue.broker_name)
                    if step is Next.ISOLATE:
                        self.selector.isolate(queue.broker_name)
                    refresh = True  # the group may have a new master since
                continue
            self._sent += counted
            return result
        error = request.give_up(last, unknown)
        if counted:
            self._failed += counted
            if isinstance(error, SendOutcomeUnknownError):
                self._unknown += counted
        raise error

    def _new_clock(self) -> Callable[[], float]:
        """The running loop's clock (:func:`clock_of`), remembered with its loop."""
        loop = self._loop = asyncio.get_running_loop()
        self._clock = clock_of(loop)
        return self._clock

    async def _repick(self, request: Request[Any], queue: QueueRef, avoid: set[str]) -> QueueRef:
        """``queue``'s broker left a send unanswered (suspect): pick again from the route as it
        is now, the group may have another master by now."""
        try:
            route = await self.routes.fresh(request.topic, NO_MASTER_POLL)
        except BrokerConnectionError:
            return queue
        return self.selector.pick(route, request.group, avoid)

    async def _writable_route(self, topic: str, deadline: float) -> Route:
        """A fresh route of ``topic``. While it has no writable queue (its groups have no
        master: one is failing over, docs/replication.md §6) it is fetched again every
        :data:`NO_MASTER_POLL` seconds until ``deadline``; then the selector says so."""
        loop = asyncio.get_running_loop()
        while True:
            route = await self.routes.fresh(topic, NO_MASTER_POLL / 2)
            if route.writable or loop.time() + NO_MASTER_POLL >= deadline:
                return route
            await asyncio.sleep(NO_MASTER_POLL)

    async def _exchange(self, request: Request[Any], queue: QueueRef, timeout: float) -> Any:
        """One attempt: the broker's answer, or :class:`AttemptFailed` saying how it failed."""
        try:
            connection = self.pool.open(queue.address) or await self.pool.get(queue.address)
            if request.prepare is not None:
                await request.prepare(queue, connection)
        except BrokerConnectionError as exc:  # the request never left
            raise AttemptFailed(exc, Failure.NOT_SENT) from exc
        slow: SlowWatch | None = None
        if request.fixed is None:  # a topic's queue: watch the route while it is unanswered
            slow = (WATCH_AFTER, functools.partial(self._start_watch, request.topic, queue))
        try:
            if connection.paused:  # the socket's buffer is full: request() waits for it
                answer = await connection.request(
                    request.code, request.body(queue), request.reply, timeout, slow=slow
                )
            else:  # the request's own future, without request()'s coroutine level
                future = connection.begin(
                    request.code, request.body(queue), request.reply, timeout, slow
                )
                request_id = connection.last_id
                try:
                    answer = await future
                except asyncio.CancelledError:
                    connection.forget(request_id, request.code)
                    raise
        except BrokerConnectionError as exc:  # lost after writing, or no answer in time
            if isinstance(exc, RequestTimeoutError):
                self._suspect(queue.address)
            raise AttemptFailed(exc, Failure.UNKNOWN) from exc
        except (BrokerError, ProtocolError) as exc:
            self._suspects.pop(queue.address, None)  # it answers
            raise AttemptFailed(exc, Failure.REFUSED) from exc
        if self._suspects:
            self._suspects.pop(queue.address, None)
        return answer

    # -- suspect brokers ------------------------------------------------------------------

    def _suspect(self, address: str) -> None:
        self._suspects[address] = time.monotonic() + SUSPECT_SECONDS

    def _suspected(self, address: str) -> bool:
        until = self._suspects.get(address)
        if until is not None and until < time.monotonic():
            del self._suspects[address]
            return False
        return until is not None

    def _start_watch(
        self,
        topic: str,
        queue: QueueRef,
        answer: asyncio.Future[Any],
        abort: Callable[[BaseException], None],
    ) -> None:
        """A send to ``queue`` is late: watch ``topic``'s route until it is answered (bound to
        its topic and queue with ``functools.partial`` per request: cheaper than a closure)."""
        task = asyncio.ensure_future(self._until_moved(topic, queue, answer, abort))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _until_moved(
        self,
        topic: str,
        queue: QueueRef,
        answer: asyncio.Future[Any],
        abort: Callable[[BaseException], None],
    ) -> None:
        """While ``answer`` is pending: when the route says ``queue``'s group has another
        master, or none, stop waiting on this one (it is suspect from now on)."""
        while not answer.done():
            try:
                route = await self.routes.fresh(topic, NO_MASTER_POLL)
            except PocketMQError:
                route = None
            if answer.done():
                return
            if route is not None and (
                queue.broker_name in route.masterless
                or route.addresses.get(queue.broker_name, queue.address) != queue.address
            ):
                self._suspect(queue.address)
                abort(
                    BrokerConnectionError(
                        f"{queue.address} did not answer and group {queue.broker_name!r} has "
                        "another master now, or none (a failover)",
                        address=queue.address,
                    )
                )
                return
            await asyncio.sleep(NO_MASTER_POLL)

    async def close(self) -> None:
        """Stop watching routes (the producer is closing; its sends are over)."""
        watchers = list(self._watchers)
        for task in watchers:
            task.cancel()
        if watchers:
            await asyncio.wait(watchers)

    def statistics(self) -> ProducerStatistics:
        """What this sender did so far."""
        return ProducerStatistics(
            sent=self._sent,
            failed=self._failed,
            retries=self._retries,
            backoffs=self._backoffs,
            unknown_outcomes=self._unknown,
            batches=self._batches,
        )
