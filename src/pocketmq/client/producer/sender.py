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
- everything else the handler allows is retried at once, on another broker when it asks so.

The sender also counts what it did, for :class:`~pocketmq.client.producer.ProducerStatistics`.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, TypeVar

from pocketmq.client.connection import ClientConnection
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
from pocketmq.errors import BrokerConnectionError, BrokerError, SendOutcomeUnknownError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["Sender"]

R = TypeVar("R")

NO_MASTER_POLL = 0.2
"""How often a send waiting for a group's new master asks for the route again (seconds)."""


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

    # -- the requests producers make ------------------------------------------------------

    async def send(
        self, topic: str, wires: list[w.WireMessage], *, group: str | None = None
    ) -> list[SendResult]:
        """Store ``wires`` (messages of ``topic``) as one request; ``group`` marks FIFO
        messages, whose sends leave one at a time, in call order."""
        request = SendMessages(topic, wires, producer_group=self.config.group, group=group)
        if group:
            lock = self._fifo_locks.setdefault(group, asyncio.Lock())
            async with lock:
                return await self.run(request)
        return await self.run(request)

    async def send_to(self, queue: QueueRef, wire: w.WireMessage) -> SendResult:
        """Store ``wire`` in one given queue (a consumer's re-send to its retry topic)."""
        request = SendMessages(wire.topic, [wire], producer_group=self.config.group, queue=queue)
        [result] = await self.run(request)
        return result

    async def send_oneway(self, wire: w.WireMessage, group: str | None) -> None:
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.send_timeout
        counted = request.messages
        schedule = None  # created at the first flow-control refusal
        next_retry_at = first_attempt_at = 0.0
        avoid: set[str] = set()
        refresh = False  # ask for the route again before the next attempt
        unknown = False
        last: AttemptFailed | None = None
        retry_at: float | None = None
        for attempt in range(config.retries + 1):
            if retry_at is not None:  # flow control: wait out the backoff deadline
                wait = min(retry_at, deadline) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            now = loop.time()
            if now >= deadline:
                break
            if not attempt:
                first_attempt_at = now
            elif counted:
                self._retries += 1
            if schedule is not None:
                next_retry_at, attempt_deadline = schedule.start_attempt(now)
                timeout = min(deadline, attempt_deadline) - now
            else:
                timeout = deadline - now
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
                        next_retry_at, _ = schedule.start_attempt(
                            first_attempt_at if attempt == 0 else now
                        )
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

    async def _writable_route(self, topic: str, deadline: float) -> Route:
        """A fresh route of ``topic``. While it has no writable queue (its groups have no
        master: one is failing over, docs/replication.md §6) it is fetched again every
        :data:`NO_MASTER_POLL` seconds until ``deadline``; then the selector says so."""
        loop = asyncio.get_running_loop()
        while True:
            route = await self.routes.get(topic, refresh=True)
            if route.writable or loop.time() + NO_MASTER_POLL >= deadline:
                return route
            await asyncio.sleep(NO_MASTER_POLL)

    async def _exchange(self, request: Request[Any], queue: QueueRef, timeout: float) -> Any:
        """One attempt: the broker's answer, or :class:`AttemptFailed` saying how it failed."""
        try:
            connection: ClientConnection = await self.pool.get(queue.address)
            if request.prepare is not None:
                await request.prepare(queue, connection)
        except BrokerConnectionError as exc:  # the request never left
            raise AttemptFailed(exc, Failure.NOT_SENT) from exc
        try:
            return await connection.request(
                request.code, request.body(queue), request.reply, timeout
            )
        except BrokerConnectionError as exc:  # lost after writing, or no answer in time
            raise AttemptFailed(exc, Failure.UNKNOWN) from exc
        except BrokerError as exc:
            raise AttemptFailed(exc, Failure.REFUSED) from exc

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
