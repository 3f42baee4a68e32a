"""PushConsumer: the broker's queues are shared by a group's live consumers, and a listener is
called with each batch of messages (seed 000/001 semantics).

**Clustering** (default): the queues of each subscribed topic — and of the group's retry topic —
are divided among the group's live consumers (sorted, contiguous blocks), and divided again
whenever one joins or leaves. Each owned queue has a pull loop (long polling) feeding a *process
queue*; workers call the listener. A message leaves the process queue when it succeeded or was
handed back to the broker for a retry, and the committed offset is always the smallest offset
still in the process queue: a message that is not finished is never skipped. Offsets are
committed to the broker every 5 s, on rebalance and on close.

**Failures** (``RECONSUME_LATER``, an exception, ``None``, or running past ``consume_timeout``):
the failed messages (after ``ConsumeContext.ack_index``) are sent back to the broker, which stores
them in ``%RETRY%<group>`` after a growing delay or in ``%DLQ%<group>`` once retries are used up.
If the broker cannot take them back, they are re-sent to the retry topic like any message; if
that fails too they stay here and are consumed again after 5 s.

**Broadcasting**: every consumer gets every queue; offsets live in a local file; failures are
logged and dropped (no retry), as in RocketMQ.

**Orderly** (``orderly=True``, 4.x style): a queue is consumed only while this consumer holds its
broker lock, so a rebalance never lets two consumers work on one queue. Within a queue each
message group is a lane consumed one message at a time, in order; different groups proceed in
parallel. A failure suspends the lane for ``suspend_time`` (1 s) and retries the same message;
after the group's max retries it goes to the dead-letter queue and the lane moves on — or never,
when the group's max retries is -1.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import inspect
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, cast

from pocketmq import properties as props
from pocketmq.client.base import ClientBase, resolve_config
from pocketmq.client.config import ClientConfig
from pocketmq.client.connection import ClientConnection
from pocketmq.client.convert import to_view
from pocketmq.client.message import ConsumeStatus, MessageView
from pocketmq.client.routes import QueueRef
from pocketmq.client.simple import normalize_subscriptions
from pocketmq.errors import ClosedError, Code, InvalidArgumentError, PocketMQError, error_from_code
from pocketmq.names import validate_group_name
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = [
    "ConsumeContext",
    "ConsumerStatistics",
    "MessageModel",
    "PushConsumer",
    "PushConsumerConfig",
    "allocate_average",
]

log = logging.getLogger("pocketmq.client")

Listener = Callable[..., ConsumeStatus | Awaitable[ConsumeStatus | None] | None]
QueueKey = tuple[str, str, int]  # broker name, topic, queue id


class MessageModel(enum.Enum):
    CLUSTERING = "clustering"
    BROADCASTING = "broadcasting"


@dataclass(frozen=True, kw_only=True, slots=True)
class PushConsumerConfig:
    model: MessageModel = MessageModel.CLUSTERING
    batch_size: int = 1
    concurrency: int = 16
    pull_batch: int = 32
    long_poll: float = 15.0
    consume_timeout: float = 900.0
    max_cached_per_queue: int = 1000
    offset_persist_interval: float = 5.0
    rebalance_interval: float = 20.0
    local_retry_delay: float = 5.0
    max_reconsume_times: int = -1
    offset_store_dir: str | None = None
    close_timeout: float = 10.0
    report_outcomes: bool = True
    """Tell the broker about successful attempts too (for ``pocketmq message history``)."""
    orderly: bool = False
    suspend_time: float = 1.0
    lock_renew_interval: float = 20.0


@dataclass(slots=True)
class ConsumeContext:
    """Passed to listeners that take a second argument.

    ``ack_index``: the index of the last message of the batch that succeeded when the listener
    returns SUCCESS (the rest are retried). ``delay_level``: 0 lets the broker choose the retry
    delay, a level 1-18 picks it, -1 sends the failed messages straight to the dead-letter queue.
    """

    ack_index: int
    delay_level: int = 0
    queue: tuple[str, str, int] = ("", "", 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerStatistics:
    consumed: int
    failed: int
    sent_back: int
    resent: int
    local_retries: int
    dropped_broadcast_failures: int
    dead_lettered: int
    queues: int
    cached: int


@dataclass(slots=True)
class _ProcessQueue:
    key: QueueKey
    address: str
    expression: str
    next_offset: int = -1
    messages: dict[int, w.DeliveredMessage] = field(default_factory=dict)
    dropped: bool = False
    pull_task: asyncio.Task[None] | None = None
    space: asyncio.Event = field(default_factory=asyncio.Event)
    local_attempts: dict[int, int] = field(default_factory=dict)
    lanes: dict[str, collections.deque[w.DeliveredMessage]] = field(default_factory=dict)
    lane_tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def commit_offset(self) -> int:
        return min(self.messages) if self.messages else self.next_offset

    def remove(self, offsets: Sequence[int]) -> None:
        for offset in offsets:
            self.messages.pop(offset, None)
            self.local_attempts.pop(offset, None)
        self.space.set()


def allocate_average(
    queues: Sequence[QueueRef], consumers: Sequence[str], me: str
) -> list[QueueRef]:
    """My contiguous share of ``queues`` among ``consumers`` (both sorted the same everywhere)."""
    if me not in consumers or not queues:
        return []
    total, members = len(queues), len(consumers)
    index = consumers.index(me)
    base, extra = divmod(total, members)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return list(queues[start : start + size])


class PushConsumer(ClientBase):
    def __init__(
        self,
        group: str,
        subscriptions: Mapping[str, str] | Sequence[str] | str,
        listener: Listener,
        *,
        servers: Sequence[str] | str | None = None,
        config: PushConsumerConfig | None = None,
        client: ClientConfig | None = None,
    ) -> None:
        super().__init__(resolve_config(servers, client), self._on_push)
        if not group:
            raise InvalidArgumentError("a consumer group is required")
        validate_group_name(group)
        self.group = group
        self.config = config or PushConsumerConfig()
        if self.config.batch_size < 1 or self.config.concurrency < 1:
            raise InvalidArgumentError("batch_size and concurrency must be at least 1")
        self.subscriptions = normalize_subscriptions(subscriptions)
        if not self.subscriptions:
            raise InvalidArgumentError("subscribe to at least one topic")
        self._listener = listener
        self._async_listener = _is_async(listener)
        try:
            parameters = inspect.signature(listener).parameters
            self._wants_context = len(parameters) >= 2
        except (TypeError, ValueError):
            self._wants_context = False
        self._clustering = self.config.model is MessageModel.CLUSTERING
        self._topics = dict(self.subscriptions)
        if self._clustering:
            self._topics["%RETRY%" + group] = "*"
        self._pqs: dict[QueueKey, _ProcessQueue] = {}
        self._offsets: dict[QueueKey, int] = {}
        self._dirty: set[QueueKey] = set()
        self._work: asyncio.Queue[tuple[_ProcessQueue, list[w.DeliveredMessage]]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_soon: asyncio.Event | None = None
        self._started = False
        self._closing = False
        self._consumed = self._failed = self._sent_back = self._resent = 0
        self._local_retries = self._broadcast_drops = 0
        self._reports: dict[str, list[w.AttemptRecord]] = {}
        self._orderly = self.config.orderly
        self._lane_slots = asyncio.Semaphore(self.config.concurrency)
        self._max_retries = 16
        self._skipped_to_dlq = 0
        self._offset_file = self._offset_path() if not self._clustering else None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closing:
            raise ClosedError("consumer was closed")
        if self._started:
            return
        if self._offset_file is not None:
            self._load_local_offsets()
        self._work = asyncio.Queue(maxsize=self.config.concurrency * 2)
        self._rebalance_soon = asyncio.Event()
        for topic in self.subscriptions:
            await self.routes.get(topic)
        if self._orderly:
            self._max_retries = await self._group_max_retries()
        await self._heartbeat()
        await self._rebalance()
        self._started = True
        self.routes.start()
        self._tasks += [asyncio.create_task(self._worker()) for _ in range(self.config.concurrency)]
        self._tasks += [
            asyncio.create_task(self._heartbeat_forever()),
            asyncio.create_task(self._rebalance_forever()),
            asyncio.create_task(self._persist_forever()),
        ]
        if self._orderly:
            self._tasks.append(asyncio.create_task(self._renew_locks_forever()))

    async def aclose(self) -> None:
        if self._closing:
            return
        self._closing = True
        for pq in self._pqs.values():  # stop pulling, finish what is in hand
            if pq.pull_task is not None:
                pq.pull_task.cancel()
        if self._work is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._work.join(), self.config.close_timeout)
        await self._wait_lanes(list(self._pqs.values()), self.config.close_timeout)
        for task in [*self._tasks, *self._background]:
            task.cancel()
        for task in [*self._tasks, *self._background]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for pq in self._pqs.values():
            self._mark(pq)
        self._flush_reports()
        await self._persist_offsets()
        if self._orderly:
            for pq in list(self._pqs.values()):
                await self._unlock(pq)
        await self._unregister()
        await self.close_base()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def statistics(self) -> ConsumerStatistics:
        return ConsumerStatistics(
            consumed=self._consumed,
            failed=self._failed,
            sent_back=self._sent_back,
            resent=self._resent,
            local_retries=self._local_retries,
            dropped_broadcast_failures=self._broadcast_drops,
            dead_lettered=self._skipped_to_dlq,
            queues=len(self._pqs),
            cached=sum(len(pq.messages) for pq in self._pqs.values()),
        )

    @property
    def assigned_queues(self) -> list[QueueKey]:
        return sorted(self._pqs)

    # -- membership -----------------------------------------------------------------------

    def _registration(self) -> w.HeartbeatRequest:
        return w.HeartbeatRequest(
            self.pool.client_id,
            [],
            [w.ConsumerRegistration(self.group, self.config.model.value, dict(self._topics))],
        )

    async def _addresses(self) -> set[str]:
        addresses: set[str] = set()
        for topic in self.subscriptions:
            with contextlib.suppress(PocketMQError):
                addresses.update((await self.routes.get(topic)).addresses.values())
        return addresses

    async def _heartbeat(self) -> None:
        request = self._registration()
        for address in await self._addresses():
            try:
                await self.call(address, RequestCode.HEARTBEAT, request, w.Empty)
            except PocketMQError as exc:
                if not exc.retriable:
                    raise
                log.warning("heartbeat to %s failed: %s", address, exc)

    async def _heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.client_config.heartbeat_interval)
            with contextlib.suppress(PocketMQError):
                await self._heartbeat()

    async def _unregister(self) -> None:
        request = w.UnregisterRequest(self.pool.client_id, [self.group])
        for connection in self.pool.open_connections():
            with contextlib.suppress(Exception):
                await connection.request(RequestCode.UNREGISTER_CLIENT, request, w.Empty, 1.0)

    def _on_push(self, connection: ClientConnection, code: int, body: bytes) -> None:
        if code == RequestCode.CONSUMERS_CHANGED and self._rebalance_soon is not None:
            self._rebalance_soon.set()

    # -- rebalancing ----------------------------------------------------------------------

    async def _rebalance_forever(self) -> None:
        assert self._rebalance_soon is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_soon.wait(), self.config.rebalance_interval)
            self._rebalance_soon.clear()
            await asyncio.sleep(0.05)  # let a burst of membership changes settle
            try:
                await self._rebalance()
            except PocketMQError as exc:
                log.warning("rebalance of group %s failed: %s", self.group, exc)

    async def _rebalance(self) -> None:
        async with self._rebalance_lock:
            desired: dict[QueueKey, tuple[str, str]] = {}
            for topic, expression in self._topics.items():
                try:
                    route = await self.routes.get(topic, refresh=self._started)
                except PocketMQError as exc:
                    if topic in self.subscriptions:
                        raise
                    log.debug("no route for %s yet: %s", topic, exc)
                    continue
                queues = sorted(route.readable, key=lambda q: q.key)
                if self._clustering:
                    members = await self._members(route.addresses.values())
                    mine = allocate_average(queues, members, self.pool.client_id)
                else:
                    mine = list(queues)
                for queue in mine:
                    desired[(queue.broker_name, topic, queue.queue_id)] = (
                        queue.address,
                        expression,
                    )
            for key in [k for k in self._pqs if k not in desired]:
                await self._drop(key)
            wanted = {k: v for k, v in desired.items() if k not in self._pqs}
            if self._orderly and wanted:
                wanted = await self._lock(wanted)
            for key, (address, expression) in wanted.items():
                pq = _ProcessQueue(key, address, expression)
                self._pqs[key] = pq
                pq.pull_task = asyncio.create_task(self._pull_loop(pq))

    async def _members(self, addresses: Any) -> list[str]:
        members: set[str] = {self.pool.client_id}
        for address in sorted(set(addresses)):
            try:
                reply = await self.call(
                    address,
                    RequestCode.GET_CONSUMERS,
                    w.GetConsumersRequest(self.group),
                    w.GetConsumersResponse,
                )
                members.update(reply.client_ids)
                break
            except PocketMQError as exc:
                log.debug("consumer list from %s failed: %s", address, exc)
        return sorted(members)

    async def _drop(self, key: QueueKey) -> None:
        pq = self._pqs.pop(key)
        if pq.pull_task is not None:
            pq.pull_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pq.pull_task
        if self._orderly:  # finish the message in hand, then let the next owner start
            await self._wait_lanes([pq], self.config.close_timeout)
        pq.dropped = True
        self._mark(pq)
        await self._persist_offsets(only={key})
        if self._orderly:
            await self._unlock(pq)

    # -- orderly: queue locks and lanes ---------------------------------------------------

    async def _group_max_retries(self) -> int:
        reply = await self.call_any(RequestCode.LIST_GROUPS, w.Empty(), w.ListGroupsResponse)
        for spec in reply.groups:
            if spec.name == self.group:
                return spec.max_retries
        return 16

    async def _lock(
        self, wanted: dict[QueueKey, tuple[str, str]]
    ) -> dict[QueueKey, tuple[str, str]]:
        by_address: dict[str, list[QueueKey]] = {}
        for key, (address, _) in wanted.items():
            by_address.setdefault(address, []).append(key)
        granted: dict[QueueKey, tuple[str, str]] = {}
        for address, keys in by_address.items():
            request = w.LockQueuesRequest(
                self.group, self.pool.client_id, [w.QueueRef(k[1], k[2]) for k in keys]
            )
            try:
                reply = await self.call(
                    address, RequestCode.LOCK_QUEUES, request, w.LockQueuesResponse
                )
            except PocketMQError as exc:
                log.warning("locking queues on %s failed: %s", address, exc)
                continue
            held = {(q.topic, q.queue_id) for q in reply.granted}
            for key in keys:
                if (key[1], key[2]) in held:
                    granted[key] = wanted[key]
        return granted

    async def _unlock(self, pq: _ProcessQueue) -> None:
        request = w.LockQueuesRequest(
            self.group, self.pool.client_id, [w.QueueRef(pq.key[1], pq.key[2])]
        )
        with contextlib.suppress(PocketMQError):
            await self.call(pq.address, RequestCode.UNLOCK_QUEUES, request, w.Empty)

    async def _renew_locks_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.lock_renew_interval)
            held = {k: (pq.address, pq.expression) for k, pq in self._pqs.items()}
            if not held:
                continue
            kept = await self._lock(held)
            for key in set(held) - set(kept):
                if key in self._pqs:
                    log.warning("lost the lock of %s; dropping it", key)
                    await self._drop(key)

    async def _wait_lanes(self, pqs: list[_ProcessQueue], timeout: float) -> None:
        """Let lanes finish the message in hand (lanes waiting to retry stop at once)."""
        for pq in pqs:
            pq.stopping.set()
        tasks = [t for pq in pqs for t in pq.lane_tasks.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
            for pq in pqs:
                for task in pq.lane_tasks.values():
                    task.cancel()

    def _dispatch_orderly(self, pq: _ProcessQueue, messages: list[w.DeliveredMessage]) -> None:
        for message in messages:
            key = message.properties.get(props.MESSAGE_GROUP) or ""
            pq.lanes.setdefault(key, collections.deque()).append(message)
            if key not in pq.lane_tasks:
                pq.lane_tasks[key] = asyncio.create_task(self._run_lane(pq, key))

    async def _run_lane(self, pq: _ProcessQueue, key: str) -> None:
        lane = pq.lanes[key]
        try:
            while lane and not pq.stopping.is_set():
                message = lane[0]
                async with self._lane_slots:
                    finished = await self._consume_in_order(pq, message)
                if finished:
                    lane.popleft()
                    pq.remove([message.queue_offset])
                    self._mark(pq)
                else:  # suspend this lane only; a close or rebalance cuts the wait short
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(pq.stopping.wait(), self.config.suspend_time)
        finally:
            if pq.lane_tasks.get(key) is asyncio.current_task():
                del pq.lane_tasks[key]
            if not lane:
                pq.lanes.pop(key, None)

    async def _consume_in_order(self, pq: _ProcessQueue, message: w.DeliveredMessage) -> bool:
        """One attempt at the head of a lane; True once it is done with (consumed or DLQ)."""
        view = self._view(pq, message)
        context = ConsumeContext(ack_index=0, queue=pq.key)
        started = time.time()
        status, outcome, error = await self._invoke([view], context)
        if status is ConsumeStatus.SUCCESS:
            self._consumed += 1
            self._report(pq, [message], [view], started)
            return True
        self._failed += 1
        offset = message.queue_offset
        retries_used = pq.local_attempts.get(offset, 0)
        if self._max_retries >= 0 and retries_used >= self._max_retries:
            if await self._hand_back(pq, (message, outcome, error, started), -1):  # to the DLQ
                self._skipped_to_dlq += 1
                return True
            return False  # could not move it: never skip it silently
        pq.local_attempts[offset] = retries_used + 1
        self._local_retries += 1
        return False

    # -- pulling --------------------------------------------------------------------------

    async def _initial_offset(self, pq: _ProcessQueue) -> int:
        if not self._clustering and pq.key in self._offsets:
            return self._offsets[pq.key]
        _broker, topic, queue_id = pq.key
        reply = await self.call(
            pq.address,
            RequestCode.QUERY_OFFSET,
            w.QueryOffsetRequest(self.group, topic, queue_id),
            w.QueryOffsetResponse,
        )
        return reply.offset

    async def _pull_loop(self, pq: _ProcessQueue) -> None:
        assert self._work is not None
        _, topic, queue_id = pq.key
        config = self.config
        wait_ms = int(config.long_poll * 1000)
        while not pq.dropped:
            try:
                if pq.next_offset < 0:
                    pq.next_offset = await self._initial_offset(pq)
                if len(pq.messages) >= config.max_cached_per_queue:
                    pq.space.clear()
                    await pq.space.wait()
                    continue
                connection = await self.pool.get(pq.address)
                reply = await connection.request(
                    RequestCode.PULL,
                    w.PullRequest(
                        self.group,
                        topic,
                        queue_id,
                        pq.next_offset,
                        config.pull_batch,
                        pq.expression,
                        wait_ms,
                    ),
                    w.PullResponse,
                    config.long_poll + self.client_config.request_timeout,
                )
            except asyncio.CancelledError:
                raise
            except PocketMQError as exc:
                log.warning("pull from %s %s/%d failed: %s", pq.address, topic, queue_id, exc)
                await asyncio.sleep(1.0)
                continue
            if pq.dropped:
                return
            if reply.status == "FOUND":
                fresh = [m for m in reply.messages if m.queue_offset not in pq.messages]
                for message in fresh:
                    pq.messages[message.queue_offset] = message
                pq.next_offset = reply.next_offset
                if self._orderly:
                    self._dispatch_orderly(pq, fresh)
                    continue
                size = config.batch_size
                for start in range(0, len(fresh), size):
                    await self._work.put((pq, fresh[start : start + size]))
            else:
                if reply.status == "OFFSET_ILLEGAL":
                    log.warning(
                        "offset %d of %s/%d is out of range; moving to %d",
                        pq.next_offset,
                        topic,
                        queue_id,
                        reply.next_offset,
                    )
                pq.next_offset = reply.next_offset
                if not pq.messages:
                    self._mark(pq)

    # -- consuming ------------------------------------------------------------------------

    async def _worker(self) -> None:
        assert self._work is not None
        while True:
            pq, batch = await self._work.get()
            try:
                if not pq.dropped:
                    await self._consume(pq, batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consuming a batch failed unexpectedly")
            finally:
                self._work.task_done()

    async def _invoke(
        self, views: list[MessageView], context: ConsumeContext
    ) -> tuple[ConsumeStatus, str, str]:
        """The listener's verdict, as ``(status, outcome name, error text)``."""
        args: tuple[Any, ...] = (views, context) if self._wants_context else (views,)
        try:
            if self._async_listener:
                pending = cast(Awaitable[ConsumeStatus | None], self._listener(*args))
                async with asyncio.timeout(self.config.consume_timeout):  # no extra task
                    result = await pending
            else:
                call = cast(Callable[..., ConsumeStatus | None], self._listener)
                async with asyncio.timeout(self.config.consume_timeout):
                    result = await asyncio.to_thread(call, *args)
        except TimeoutError:
            log.warning(
                "listener ran past the consume timeout (%.0fs)", self.config.consume_timeout
            )
            return ConsumeStatus.RECONSUME_LATER, "TIMEOUT", "consume timeout exceeded"
        except Exception as exc:
            log.exception("listener raised; the batch will be retried")
            return ConsumeStatus.RECONSUME_LATER, "EXCEPTION", f"{type(exc).__name__}: {exc}"
        if isinstance(result, ConsumeStatus):
            return result, result.value, ""
        if result is not None:
            log.warning("listener returned %r, not a ConsumeStatus; retrying the batch", result)
            return ConsumeStatus.RECONSUME_LATER, "RECONSUME_LATER", f"listener returned {result!r}"
        return ConsumeStatus.RECONSUME_LATER, "RECONSUME_LATER", "listener returned None"

    def _view(self, pq: _ProcessQueue, message: w.DeliveredMessage) -> MessageView:
        view = to_view(message)
        extra = pq.local_attempts.get(message.queue_offset, 0)
        if extra:
            view = dataclasses.replace(view, delivery_attempt=view.delivery_attempt + extra)
        return view

    async def _consume(self, pq: _ProcessQueue, batch: list[w.DeliveredMessage]) -> None:
        views = [self._view(pq, m) for m in batch]
        context = ConsumeContext(ack_index=len(batch) - 1, queue=pq.key)
        started = time.time()
        status, outcome, error = await self._invoke(views, context)
        if status is ConsumeStatus.SUCCESS:
            cut = max(-1, min(context.ack_index, len(batch) - 1)) + 1
        else:
            cut = 0
        succeeded, failed = batch[:cut], batch[cut:]
        self._consumed += len(succeeded)
        self._failed += len(failed)
        if status is ConsumeStatus.SUCCESS and failed:
            outcome, error = "RECONSUME_LATER", "after the ack index of a successful batch"
        self._report(pq, succeeded, views[:cut], started)
        finished = [m.queue_offset for m in succeeded]
        if failed:
            if not self._clustering:
                for message in failed:
                    log.warning(
                        "broadcast message %s failed and is dropped (broadcasting never retries)",
                        message.properties.get(props.MESSAGE_ID),
                    )
                self._broadcast_drops += len(failed)
                finished += [m.queue_offset for m in failed]
            else:
                kept: list[w.DeliveredMessage] = []
                for message in failed:
                    attempt = (message, outcome, error, started)
                    if await self._hand_back(pq, attempt, context.delay_level):
                        finished.append(message.queue_offset)
                    else:
                        kept.append(message)
                if kept:
                    self._retry_locally(pq, kept)
        if pq.dropped:
            return
        pq.remove(finished)
        self._mark(pq)

    async def _hand_back(
        self,
        pq: _ProcessQueue,
        attempt: tuple[w.DeliveredMessage, str, str, float],
        delay_level: int,
    ) -> bool:
        """Send-back, or re-send to the retry topic; False if neither worked."""
        message, outcome, error, started = attempt
        message_id = message.properties.get(props.MESSAGE_ID, "")
        try:
            await self.call(
                pq.address,
                RequestCode.SEND_BACK,
                w.SendBackRequest(
                    self.group,
                    message.physical_offset,
                    message_id,
                    delay_level,
                    self.config.max_reconsume_times,
                    message.properties.get(props.RETRY_TOPIC, message.topic),
                    error,
                    self.pool.client_id,
                    outcome,
                    int(started * 1000),
                ),
                w.Empty,
            )
            self._sent_back += 1
            return True
        except PocketMQError as exc:
            log.warning(
                "send-back of %s failed (%s); re-sending to the retry topic", message_id, exc
            )
        try:
            await self._resend_to_retry(message, delay_level)
            self._resent += 1
            return True
        except PocketMQError as exc:
            log.warning("re-send of %s failed (%s); consuming it again locally", message_id, exc)
            return False

    async def _resend_to_retry(self, message: w.DeliveredMessage, delay_level: int) -> None:
        retry_topic = "%RETRY%" + self.group
        route = await self.routes.get(retry_topic)
        queues = route.writable
        if not queues:
            raise ClosedError(f"{retry_topic} has no writable queue")
        reconsume = message.delivery_attempt  # = reconsume times + 1
        properties = dict(message.properties)
        properties.setdefault(props.RETRY_TOPIC, message.topic)
        properties.setdefault(props.ORIGIN_MESSAGE_ID, properties.get(props.MESSAGE_ID, ""))
        properties[props.RECONSUME_TIMES] = str(reconsume)
        if self.config.max_reconsume_times >= 0:
            properties[props.MAX_RECONSUME_TIMES] = str(self.config.max_reconsume_times)
        # seed 000: the retry waits on delay level 3 + reconsume times (-1: straight to the DLQ)
        properties[props.DELAY_LEVEL] = str(delay_level if delay_level else 3 + reconsume - 1)
        queue = queues[reconsume % len(queues)]
        reply = await self.call(
            queue.address,
            RequestCode.SEND,
            w.SendRequest(
                [
                    w.WireMessage(
                        retry_topic,
                        message.body,
                        properties,
                        queue.queue_id,
                        0,
                        message.born_timestamp,
                    )
                ]
            ),
            w.SendResponse,
        )
        item = reply.results[0]
        if item.code not in (Code.SUCCESS, Code.FLUSH_DISK_TIMEOUT):
            raise error_from_code(item.code, item.remark)

    def _report(
        self,
        pq: _ProcessQueue,
        messages: list[w.DeliveredMessage],
        views: list[MessageView],
        started: float,
    ) -> None:
        if not self.config.report_outcomes or not messages:
            return
        finished = int(time.time() * 1000)
        pending = self._reports.setdefault(pq.address, [])
        pending.extend(
            w.AttemptRecord(
                view.message_id,
                self.group,
                view.topic,
                view.delivery_attempt,
                self.pool.client_id,
                "SUCCESS",
                "",
                int(started * 1000),
                finished,
                view.message_group or "",
            )
            for view in views
        )

    def _flush_reports(self) -> None:
        reports, self._reports = self._reports, {}
        for address, attempts in reports.items():
            for connection in self.pool.open_connections():
                if connection.address == address:
                    with contextlib.suppress(PocketMQError):
                        connection.oneway(
                            RequestCode.REPORT_OUTCOMES,
                            w.ReportOutcomesRequest(self.group, self.pool.client_id, attempts),
                        )
                    break

    def _retry_locally(self, pq: _ProcessQueue, messages: list[w.DeliveredMessage]) -> None:
        """Seed 000: keep what could not be handed back and consume it again after 5 s."""
        for message in messages:
            pq.local_attempts[message.queue_offset] = (
                pq.local_attempts.get(message.queue_offset, 0) + 1
            )
        self._local_retries += len(messages)

        async def later() -> None:
            await asyncio.sleep(self.config.local_retry_delay)
            if not pq.dropped and self._work is not None:
                await self._work.put((pq, messages))

        task = asyncio.create_task(later())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- offsets --------------------------------------------------------------------------

    def _mark(self, pq: _ProcessQueue) -> None:
        offset = pq.commit_offset()
        if offset >= 0 and self._offsets.get(pq.key) != offset:
            self._offsets[pq.key] = offset
            self._dirty.add(pq.key)

    async def _persist_forever(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(min(1.0, self.config.offset_persist_interval))
            ticks += 1
            self._flush_reports()
            if (
                ticks * min(1.0, self.config.offset_persist_interval)
                < self.config.offset_persist_interval
            ):
                continue
            ticks = 0
            try:
                await self._persist_offsets()
            except Exception:
                log.exception("persisting offsets failed")

    async def _persist_offsets(self, only: set[QueueKey] | None = None) -> None:
        keys = {k for k in self._dirty if only is None or k in only}
        if not keys:
            return
        if self._offset_file is not None:
            self._dirty -= keys
            self._save_local_offsets()
            return
        by_address: dict[str, list[w.OffsetEntry]] = {}
        addresses: dict[str, str] = {}
        for pq in self._pqs.values():
            addresses[pq.key[0]] = pq.address
        for key in keys:
            broker, topic, queue_id = key
            address = addresses.get(broker)
            if address is None:
                with contextlib.suppress(PocketMQError):
                    route = await self.routes.get(topic)
                    address = route.addresses.get(broker)
            if address is None:
                continue
            by_address.setdefault(address, []).append(
                w.OffsetEntry(topic, queue_id, self._offsets[key])
            )
        for address, entries in by_address.items():
            try:
                await self.call(
                    address,
                    RequestCode.COMMIT_OFFSET,
                    w.CommitOffsetRequest(self.group, entries),
                    w.Empty,
                )
                self._dirty -= {k for k in keys if addresses.get(k[0], address) == address}
            except PocketMQError as exc:
                log.warning("committing offsets to %s failed: %s", address, exc)

    def _offset_path(self) -> Path:
        root = self.config.offset_store_dir or os.path.join(Path.home(), ".pocketmq", "offsets")
        safe_id = self.client_config.client_id.replace("@", "_").replace("/", "_")
        return Path(root) / f"{self.group}.{safe_id.split('_')[0]}.json"

    def _load_local_offsets(self) -> None:
        assert self._offset_file is not None
        try:
            raw = json.loads(self._offset_file.read_text())
        except (OSError, ValueError):
            return
        for key, offset in raw.items():
            broker, topic, queue = key.rsplit("@", 2)
            self._offsets[(broker, topic, int(queue))] = int(offset)

    def _save_local_offsets(self) -> None:
        assert self._offset_file is not None
        self._offset_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._offset_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({f"{b}@{t}@{q}": o for (b, t, q), o in self._offsets.items()}))
        os.replace(tmp, self._offset_file)


def _is_async(listener: Listener) -> bool:
    if inspect.iscoroutinefunction(listener):
        return True
    call = getattr(listener, "__call__", None)  # noqa: B004 - an object with async __call__
    return call is not None and inspect.iscoroutinefunction(call)
