"""Auto-batching: messages sent one by one leave in batches.

Two ways (docs/semantics.md, "Producer batching"):

- **Adaptive** (the default, ``ProducerConfig(batching=True)``): a plain message (no message
  group) goes out at once when no send of its topic is in flight from this producer; while one
  is, the messages that arrive wait for it and then leave together, as one request (or sooner,
  when ``max_batch`` messages or ``max_batch_bytes`` bytes are waiting). A producer that awaits
  each send is never delayed; one with many sends outstanding gets batches without a timer.
- **Linger** (``ProducerConfig(linger=...)``): a plain message is held until ``max_batch``
  messages or ``max_batch_bytes`` bytes are waiting, or ``linger`` seconds passed since the
  first of them; the price is up to ``linger`` of extra latency.

Either way the batch is one SEND request and each caller gets its own result (or the batch's
error). Fewer, bigger requests cost the broker far less per message (docs/benchmarks.md). FIFO
messages are never held: their order is kept by sending them one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pocketmq.client.message import SendResult
from pocketmq.client.producer.config import ProducerConfig
from pocketmq.protocol import structs as w

__all__ = ["Accumulator"]

SendBatch = Callable[[str, list[w.InboundMessage]], Awaitable[list[SendResult]]]


_Pending = tuple[w.InboundMessage, "asyncio.Future[SendResult]"]
"""A held message and its caller's future (a tuple: one is made per message)."""


class Accumulator:
    """Holds messages per topic and hands full (or lingered) batches to ``send_batch``."""

    def __init__(self, config: ProducerConfig, send_batch: SendBatch) -> None:
        self._config = config
        self.send_batch = send_batch
        """Sends one batch of a topic (the producer's sender)."""
        self._buffers: dict[str, list[_Pending]] = {}
        self._buffer_bytes: dict[str, int] = {}
        self._flushers: dict[str, asyncio.TimerHandle] = {}
        self._adaptive = config.linger is None
        self._sending: dict[str, int] = {}  # per topic: batches in flight
        self._tasks: set[asyncio.Task[None]] = set()  # batches being sent
        # per topic: the lone send in flight (at most one: it leaves only when nothing of its
        # topic is in flight), and the future a flush waits on, made when one asks
        self._alone: dict[str, asyncio.Future[None] | None] = {}

    @property
    def in_flight(self) -> set[asyncio.Future[None]]:
        """Batches and lone sends being sent (a flush waits for them): a lone send's future is
        made here, when asked, not per send (docs/benchmarks.md, "Producer send path, fewer
        levels")."""
        waiting: set[asyncio.Future[None]] = set(self._tasks)
        alone = self._alone
        for topic, done in alone.items():
            if done is None or done.done():  # (a waiter may have cancelled it)
                done = alone[topic] = asyncio.get_running_loop().create_future()
            waiting.add(done)
        return waiting

    def add(self, wire: w.InboundMessage) -> Awaitable[SendResult]:
        """Hold ``wire`` for the next batch of its topic; the awaitable returned gives its own
        result once sent (await it: a lone message is sent by awaiting it). A plain function,
        not a coroutine: the message is held (or marked as being sent) when ``add`` returns,
        and a held message's caller awaits its future directly, one coroutine less per
        message on the pipelined path (docs/benchmarks.md, "Producer send path")."""
        topic = wire.topic
        if self.alone(topic):
            return self._send_alone(topic, wire)
        return self.hold(wire)

    def alone(self, topic: str) -> bool:
        """Whether a message of ``topic`` leaves at once, alone: adaptive batching with nothing
        of ``topic`` in flight or held. Then it is marked in flight from now on: the caller
        sends it (:attr:`send_batch`) from its own task and calls :meth:`sent_alone` when that
        ends, however it ends; what arrives meanwhile waits for it, as behind any batch."""
        if self._adaptive and not self._sending.get(topic) and topic not in self._buffers:
            self._sending[topic] = 1
            self._alone[topic] = None
            return True
        return False

    def sent_alone(self, topic: str) -> None:
        """The lone send of ``topic`` ended (see :meth:`alone`)."""
        self._sent(topic)  # first: whatever else fails, the topic must not stay "sending"
        done = self._alone.pop(topic, None)
        if done is not None and not done.done():
            done.set_result(None)

    def hold(self, wire: w.InboundMessage) -> asyncio.Future[SendResult]:
        """Hold ``wire`` for the next batch of its topic (when :meth:`alone` said no); the
        future gives its own result once sent."""
        topic = wire.topic
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SendResult] = loop.create_future()
        buffer = self._buffers.get(topic)
        if buffer is None:
            buffer = self._buffers[topic] = []
        buffer.append((wire, future))
        size = self._buffer_bytes.get(topic, 0) + len(wire.body)
        self._buffer_bytes[topic] = size
        config = self._config
        if len(buffer) >= config.max_batch or size >= config.max_batch_bytes:
            self._flush_topic(topic)
        elif self._adaptive:
            if not self._sending.get(topic):
                self._flush_topic(topic)  # nothing to wait for: leave at once
        elif topic not in self._flushers:
            assert config.linger is not None
            self._flushers[topic] = loop.call_later(config.linger, self._flush_topic, topic)
        return future

    async def _send_alone(self, topic: str, wire: w.InboundMessage) -> SendResult:
        """A message :meth:`alone` let leave at once, sent from the caller's own task (no
        task, future or event-loop turn of its own)."""
        try:
            [result] = await self.send_batch(topic, [wire])
            return result
        finally:
            self.sent_alone(topic)

    def send_all(self) -> None:
        """Start sending everything held, without waiting for the linger time."""
        for topic in list(self._buffers):
            self._flush_topic(topic)

    def _flush_topic(self, topic: str) -> None:
        timer = self._flushers.pop(topic, None)
        if timer is not None:
            timer.cancel()
        batch = self._buffers.pop(topic, [])
        self._buffer_bytes.pop(topic, None)
        if not batch:
            return
        self._sending[topic] = self._sending.get(topic, 0) + 1
        task = asyncio.ensure_future(self._send(topic, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sent(self, topic: str) -> None:
        left = self._sending.get(topic, 1) - 1
        if left > 0:
            self._sending[topic] = left
            return
        self._sending.pop(topic, None)
        if self._adaptive and self._buffers.get(topic):
            self._flush_topic(topic)  # what waited for the batch before leaves now

    async def _send(self, topic: str, batch: list[_Pending]) -> None:
        try:
            await self._send_and_settle(topic, batch)
        finally:
            self._sent(topic)

    async def _send_and_settle(self, topic: str, batch: list[_Pending]) -> None:
        try:
            results = await self.send_batch(topic, [wire for wire, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
