"""The producer: send, send_async, send_oneway, batches, and opt-in auto-batching.

A failed send is retried (2 retries by default) on another broker when there is one, skipping
brokers that failed recently, all inside one overall timeout (3 s); flow control is waited out
with a backoff (docs/semantics.md, "Producer"; the loop is :class:`~.sender.Sender`). The
message id is assigned once, so a retry that duplicates a message carries the same id. A send
whose request may have reached the broker but got no answer ends as
:class:`~pocketmq.errors.SendOutcomeUnknownError`, never as a plain failure.

FIFO messages (with a message group) always go to their group's queue: a retry waits for that
queue rather than moving the message to another one, which would break the order.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from pocketmq.client.base import ClientBase, resolve_config
from pocketmq.client.config import ClientConfig
from pocketmq.client.convert import to_wire, validate_message
from pocketmq.client.message import Message, SendResult
from pocketmq.client.producer.accumulator import Accumulator
from pocketmq.client.producer.config import ProducerConfig, ProducerStatistics, SendCallback
from pocketmq.client.producer.sender import Sender
from pocketmq.errors import InvalidArgumentError

__all__ = ["Producer"]


class Producer(ClientBase):
    """Sends messages. Use as ``async with Producer(...) as producer:``.

    ``sender`` is the retry loop every send goes through; code built on a producer (the
    transaction producer) sends through it too, so there is one place that decides retries.
    """

    _what = "producer"

    def __init__(
        self,
        *,
        servers: Sequence[str] | str | None = None,
        config: ProducerConfig | None = None,
        client: ClientConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(resolve_config(servers, client))
        self.config = config or ProducerConfig()
        self.sender = Sender(self.pool, self.routes, self.config, rng)
        self._accumulator = Accumulator(self.config, self.sender.send)
        self._tasks: set[asyncio.Task[SendResult]] = set()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start refreshing routes; ``async with`` calls it. A closed producer stays closed."""
        self._check_not_closed()
        if not self._started:
            self._started = True
            self.routes.start()

    async def aclose(self) -> None:
        """Send what auto-batching holds, wait for sends in progress, close connections."""
        if self._closed:
            return
        await self.flush()
        self._closed = True
        await self._wait_for_sends()
        await self.sender.close()
        await self.close_base()

    # -- sending --------------------------------------------------------------------------

    async def send(self, message: Message) -> SendResult:
        """Send and wait for the broker's acknowledgement (retrying as configured)."""
        if self._closed or not self._started:
            self._check_open()  # raises
        config = self.config
        validate_message(message, config.max_message_size)
        wire = to_wire(message)
        group = message.message_group
        if not group and (config.batching or config.linger is not None):
            # the accumulator's add, without its lone send's coroutine level
            # (docs/benchmarks.md, "Producer send path, fewer levels")
            accumulator = self._accumulator
            topic = wire.topic
            if not accumulator.alone(topic):
                return await accumulator.hold(wire)
            try:
                [result] = await accumulator.send_batch(topic, [wire])
            finally:
                accumulator.sent_alone(topic)
            return result
        [result] = await self.sender.send(message.topic, [wire], group=group)
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
        await self.sender.send_oneway(to_wire(message), message.message_group)

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
        return await self.sender.send(topic, [to_wire(m) for m in messages])

    async def flush(self) -> None:
        """Send whatever auto-batching is holding and wait for it (and for ``send_async``)."""
        self._accumulator.send_all()
        await self._wait_for_sends()

    async def _wait_for_sends(self) -> None:
        """Wait until every send in progress ended. ``asyncio.wait``, not ``gather``: a
        cancelled flush must not cancel the sends it waited for (other callers' messages)."""
        pending: set[asyncio.Future[Any]] = {*self._tasks, *self._accumulator.in_flight}
        if pending:
            await asyncio.wait(pending)

    def statistics(self) -> ProducerStatistics:
        """Messages sent and failed, retries, backoffs, unknown outcomes, requests answered."""
        return self.sender.statistics()
