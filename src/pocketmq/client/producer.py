"""The producer: send, send_async, send_oneway, batches, and opt-in auto-batching.

Retries follow seed 004 and seed 000: a failed send is retried (2 retries by default) on another
broker when there is one, skipping brokers that failed recently, all inside one overall timeout
(3 s) checked before each attempt. Flow control (TOO_MANY_REQUESTS) is retried after an
exponential backoff; other errors at once. The message id is assigned once, so a retry that
duplicates a message carries the same id. A send whose request may have reached the broker but
got no answer ends as :class:`SendOutcomeUnknownError`, never as a plain failure.

FIFO messages (with a message group) always go to their group's queue: a retry waits for that
queue rather than moving the message to another one, which would break the order.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

from pocketmq.client.backoff import Backoff
from pocketmq.client.base import ClientBase, resolve_config
from pocketmq.client.config import ClientConfig
from pocketmq.client.connection import ClientConnection
from pocketmq.client.convert import to_wire, validate_message
from pocketmq.client.message import Message, SendResult, SendStatus
from pocketmq.client.routes import QueueRef, Route
from pocketmq.errors import (
    BrokerConnectionError,
    BrokerError,
    ClosedError,
    Code,
    InvalidArgumentError,
    PocketMQError,
    RequestTimeoutError,
    SendOutcomeUnknownError,
    TooManyRequestsError,
    TopicNotFoundError,
    error_from_code,
)
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.routing import queue_for_group

__all__ = ["Producer", "ProducerConfig", "ProducerStatistics", "SendCallback"]

log = logging.getLogger("pocketmq.client")

SendCallback = Callable[[SendResult | None, BaseException | None], None]

ISOLATION_SECONDS = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ProducerConfig:
    group: str = ""
    retries: int = 2
    send_timeout: float = 3.0
    backoff: Backoff = field(default_factory=Backoff)
    linger: float | None = None
    """Auto-batching: wait up to this many seconds to fill a batch (None: send at once)."""
    max_batch: int = 256
    max_batch_bytes: int = 4 * 1024 * 1024
    max_message_size: int = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class ProducerStatistics:
    sent: int
    failed: int
    retries: int
    backoffs: int
    unknown_outcomes: int
    batches: int


@dataclass(slots=True)
class _Pending:
    wire: w.WireMessage
    future: asyncio.Future[SendResult]


class _SendFailure(Exception):
    def __init__(self, error: PocketMQError, *, unknown: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.unknown = unknown


class Producer(ClientBase):
    """Sends messages. Use as ``async with Producer(...) as producer:``."""

    def __init__(
        self,
        *,
        servers: Sequence[str] | str | None = None,
        config: ProducerConfig | None = None,
        client: ClientConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(resolve_config(servers, client), self._on_push)
        self.config = config or ProducerConfig()
        self._pool = self.pool
        self._routes = self.routes
        self._rng = rng or random.Random()
        self._turn: dict[str, int] = {}
        self._isolated: dict[str, float] = {}
        self._started = False
        self._closed = False
        self._buffers: dict[str, list[_Pending]] = {}
        self._buffer_bytes: dict[str, int] = {}
        self._flushers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._fifo_locks: dict[str, asyncio.Lock] = {}
        self._sent = self._failed = self._retries = self._backoffs = 0
        self._unknown = self._batches = 0

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ClosedError("producer was closed")
        if not self._started:
            self._started = True
            self._routes.start()

    async def aclose(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.close_base()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("producer was closed")
        if not self._started:
            raise ClosedError("producer not started: use `async with` or await start()")

    def _on_push(self, connection: ClientConnection, code: int, body: bytes) -> None:
        """Brokers push nothing to plain producers (transaction producers override)."""

    # -- sending --------------------------------------------------------------------------

    async def send(self, message: Message) -> SendResult:
        """Send and wait for the broker's acknowledgement (retrying as configured)."""
        self._check_open()
        validate_message(message, self.config.max_message_size)
        wire = to_wire(message)
        if self.config.linger is not None and not message.message_group:
            return await self._enqueue(wire)
        [result] = await self._send_wires(message.topic, [wire], group=message.message_group)
        return result

    def send_async(
        self, message: Message, callback: SendCallback | None = None
    ) -> asyncio.Task[SendResult]:
        """Start a send; the task's result (and ``callback``) report the outcome."""
        self._check_open()
        task = asyncio.ensure_future(self.send(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if callback is not None:

            def report(done: asyncio.Task[SendResult]) -> None:
                if done.cancelled():
                    callback(None, asyncio.CancelledError())
                elif done.exception() is not None:
                    callback(None, done.exception())
                else:
                    callback(done.result(), None)

            task.add_done_callback(report)
        return task

    async def send_oneway(self, message: Message) -> None:
        """Fire and forget: no acknowledgement, no retry (the message may be lost)."""
        self._check_open()
        validate_message(message, self.config.max_message_size)
        wire = to_wire(message)
        route = await self._routes.get(message.topic)
        queue = self._pick_queue(route, message.message_group, set())
        connection = await self._pool.get(queue.address)
        connection.oneway(
            RequestCode.SEND,
            w.SendRequest([_with_queue(wire, queue.queue_id)], self.config.group),
        )
        self._sent += 1

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Send messages of one topic as one request to one queue (atomic per broker call)."""
        self._check_open()
        if not messages:
            return []
        topic = messages[0].topic
        for message in messages:
            validate_message(message, self.config.max_message_size)
            if message.topic != topic:
                raise InvalidArgumentError("a batch holds messages of one topic")
            if message.message_group or message.delivery_time is not None:
                raise InvalidArgumentError("FIFO and delayed messages cannot be batched")
        return await self._send_wires(topic, [to_wire(m) for m in messages], group=None)

    async def flush(self) -> None:
        """Send whatever auto-batching is holding and wait for it."""
        for topic in list(self._buffers):
            self._flush_topic(topic)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- auto-batching --------------------------------------------------------------------

    async def _enqueue(self, wire: w.WireMessage) -> SendResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SendResult] = loop.create_future()
        topic = wire.topic
        buffer = self._buffers.setdefault(topic, [])
        buffer.append(_Pending(wire, future))
        size = self._buffer_bytes.get(topic, 0) + len(wire.body)
        self._buffer_bytes[topic] = size
        config = self.config
        if len(buffer) >= config.max_batch or size >= config.max_batch_bytes:
            self._flush_topic(topic)
        elif topic not in self._flushers:
            assert config.linger is not None
            self._flushers[topic] = loop.call_later(config.linger, self._flush_topic, topic)
        return await future

    def _flush_topic(self, topic: str) -> None:
        timer = self._flushers.pop(topic, None)
        if timer is not None:
            timer.cancel()
        batch = self._buffers.pop(topic, [])
        self._buffer_bytes.pop(topic, None)
        if not batch:
            return
        task = asyncio.ensure_future(self._send_batch_task(topic, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_batch_task(self, topic: str, batch: list[_Pending]) -> None:
        try:
            results = await self._send_wires(topic, [p.wire for p in batch], group=None)
        except BaseException as exc:
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for pending, result in zip(batch, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)

    # -- the send loop --------------------------------------------------------------------

    async def _send_wires(
        self, topic: str, wires: list[w.WireMessage], *, group: str | None
    ) -> list[SendResult]:
        if group:
            lock = self._fifo_locks.setdefault(group, asyncio.Lock())
            async with lock:  # one group's messages leave one at a time, in call order
                return await self._send_with_retries(topic, wires, group)
        return await self._send_with_retries(topic, wires, None)

    async def _send_with_retries(
        self, topic: str, wires: list[w.WireMessage], group: str | None
    ) -> list[SendResult]:
        config = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.send_timeout
        schedule = None  # created at the first TOO_MANY_REQUESTS (seed 004's backoff)
        first_attempt_at = 0.0
        tried: set[str] = set()
        unknown = False
        last_error: PocketMQError | None = None
        retry_at: float | None = None
        for attempt in range(config.retries + 1):
            if retry_at is not None:  # flow control: wait out the backoff deadline
                wait = min(retry_at, deadline) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            now = loop.time()
            if now >= deadline:
                break
            if attempt:
                self._retries += 1
            else:
                first_attempt_at = now
            if schedule is not None:
                next_retry_at, attempt_deadline = schedule.start_attempt(now)
                timeout = min(deadline, attempt_deadline) - now
            else:
                timeout = deadline - now
            try:
                route = self._routes.cached(topic) or await self._routes.get(topic)
                queue = self._pick_queue(route, group, tried)
                results = await self._attempt(queue, wires, timeout)
            except _SendFailure as failure:
                error, last_error = failure.error, failure.error
                unknown = unknown or failure.unknown
                retry_at = None
                if isinstance(error, TopicNotFoundError) and attempt == 0:
                    self._routes.invalidate(topic)  # the route may be stale: ask again once
                    continue
                if not error.retriable:
                    break
                if isinstance(error, TooManyRequestsError):
                    self._backoffs += 1
                    if schedule is None:  # the first attempt's deadline: its start + 1 s
                        schedule = config.backoff.schedule(self._rng)
                        next_retry_at, _ = schedule.start_attempt(
                            first_attempt_at if attempt == 0 else now
                        )
                    retry_at = next_retry_at
                elif not group:
                    tried.add(queue.broker_name)
                    self._isolated[queue.broker_name] = time.monotonic() + ISOLATION_SECONDS
                continue
            self._sent += len(results)
            return results
        self._failed += len(wires)
        message_id = wires[0].properties.get("UNIQ_KEY", "")
        if unknown or last_error is None:
            self._unknown += len(wires)
            raise SendOutcomeUnknownError(
                f"send to topic {topic!r} may or may not have been stored "
                f"({last_error or 'timed out'}); sending again with the same message id is safe "
                "for deduplicating consumers",
                message_id=message_id,
                cause=last_error,
            )
        raise last_error

    async def _attempt(
        self, queue: QueueRef, wires: list[w.WireMessage], timeout: float
    ) -> list[SendResult]:
        try:
            connection = await self._pool.get(queue.address)
        except BrokerConnectionError as exc:
            raise _SendFailure(exc, unknown=False) from exc
        request = w.SendRequest([_with_queue(m, queue.queue_id) for m in wires], self.config.group)
        try:
            response = await connection.request(RequestCode.SEND, request, w.SendResponse, timeout)
        except RequestTimeoutError as exc:
            raise _SendFailure(exc, unknown=True) from exc
        except BrokerConnectionError as exc:
            raise _SendFailure(exc, unknown=True) from exc
        except BrokerError as exc:
            raise _SendFailure(exc, unknown=False) from exc
        self._batches += 1
        results: list[SendResult] = []
        for wire, item in zip(wires, response.results, strict=True):
            if item.code == Code.SUCCESS:
                status = SendStatus.OK
            elif item.code == Code.FLUSH_DISK_TIMEOUT:
                status = SendStatus.FLUSH_DISK_TIMEOUT
            else:
                # STORAGE_FAILED: written before the broker's fsync failed, maybe durable
                unknown = item.code == Code.STORAGE_FAILED
                raise _SendFailure(error_from_code(item.code, item.remark), unknown=unknown)
            results.append(
                SendResult(
                    message_id=item.message_id or wire.properties.get("UNIQ_KEY", ""),
                    topic=wire.topic,
                    queue_id=item.queue_id,
                    queue_offset=item.queue_offset,
                    broker_name=response.broker_name or queue.broker_name,
                    status=status,
                    transaction_id=item.transaction_id or None,
                )
            )
        return results

    def _pick_queue(self, route: Route, group: str | None, avoid: set[str]) -> QueueRef:
        queues = route.writable
        if not queues:
            raise TopicNotFoundError(f"topic {route.topic!r} has no writable queue")
        if group:
            return queues[queue_for_group(group, len(queues))]
        turn = self._turn.get(route.topic)
        if turn is None:
            turn = self._rng.randrange(1 << 16)
        self._turn[route.topic] = turn + 1
        if not avoid and not self._isolated:
            return queues[turn % len(queues)]
        now = time.monotonic()
        isolated = {b for b, until in self._isolated.items() if until > now}
        if not isolated:
            self._isolated.clear()
        candidates = [
            q for q in queues if q.broker_name not in avoid and q.broker_name not in isolated
        ]
        if not candidates:
            candidates = [q for q in queues if q.broker_name not in avoid] or list(queues)
        return candidates[turn % len(candidates)]

    def statistics(self) -> ProducerStatistics:
        return ProducerStatistics(
            sent=self._sent,
            failed=self._failed,
            retries=self._retries,
            backoffs=self._backoffs,
            unknown_outcomes=self._unknown,
            batches=self._batches,
        )


def _with_queue(message: w.WireMessage, queue_id: int) -> w.WireMessage:
    return w.WireMessage(
        message.topic,
        message.body,
        message.properties,
        queue_id,
        message.flags,
        message.born_timestamp,
    )
