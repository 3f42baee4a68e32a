"""RabbitMQ with a quorum queue and publisher confirms (a confirm comes after fsync on a
majority, here the one node: compared with pocketmq's sync flush): the machine's running
RabbitMQ; the aio-pika client."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from pocketmq.bench.broker import in_flight
from pocketmq.bench.peers.workload import (
    LatencyProbe,
    Peer,
    RedeliveryProbe,
    paced,
    processes_named,
    stamped_body,
)

__all__ = ["RabbitPeer"]

_PREFETCH = 256
_QUORUM = {"x-queue-type": "quorum"}


class RabbitPeer(Peer):
    """One quorum queue per workload (deleted at the end), persistent messages, publisher
    confirms, a consumer with a prefetch of 256 acknowledging each message. RabbitMQ has no
    delayed redelivery: a refused message goes to a delay queue with a per-message TTL that
    dead-letters it back (the usual recipe)."""

    name = "RabbitMQ quorum"
    durability = "quorum queue, confirmed after fsync"

    def __init__(self, url: str = "amqp://guest:guest@127.0.0.1:5672/") -> None:
        self._url = url
        self._connection: Any = None
        self._names = itertools.count()
        self._prefix = f"peers-{os.getpid()}"
        self._queues: list[str] = []

    @property
    def server_pids(self) -> list[int]:
        """The running RabbitMQ node (``beam.smp``)."""
        return processes_named("beam.smp")

    async def start(self) -> None:
        """Connect with a publisher-confirm channel."""
        try:
            self._connection = await aio_pika.connect(self._url, timeout=5)
        except Exception as exc:  # aio-pika raises AMQPConnectionError subclasses and OSError
            raise OSError(f"RabbitMQ is not reachable at {self._url}: {exc}") from exc
        self._publisher = await self._connection.channel(publisher_confirms=True)

    async def close(self) -> None:
        """Delete the queues this benchmark declared and disconnect."""
        if self._connection is None:
            return
        for queue in self._queues:
            with contextlib.suppress(Exception):  # best effort: the figures are already taken
                await self._publisher.queue_delete(queue)
        await self._connection.close()
        self._connection = None

    async def _queue(self, arguments: dict[str, Any] | None = None) -> str:
        name = f"{self._prefix}-{next(self._names)}"
        await self._publisher.declare_queue(name, durable=True, arguments=arguments or _QUORUM)
        self._queues.append(name)
        return name

    async def _publish(self, queue: str, body: bytes, **options: Any) -> None:
        message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT, **options)
        await self._publisher.default_exchange.publish(message, routing_key=queue)

    async def _consumer(self, queue: str, handle: Any) -> tuple[Any, str]:
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=_PREFETCH)
        declared = await channel.get_queue(queue, ensure=False)
        return channel, await declared.consume(handle)

    async def publish_each(self, count: int) -> None:
        """Persistent publishes, each awaiting its confirm."""
        queue = await self._queue()
        for n in range(count):
            await self._publish(queue, stamped_body(n))

    async def publish_in_flight(self, count: int, width: int) -> None:
        """Persistent publishes from ``width`` workers on one confirm channel."""
        queue = await self._queue()
        body = stamped_body()
        await in_flight(count, width, lambda: self._publish(queue, body))

    async def fill(self, count: int) -> None:
        """Persistent publishes with 256 outstanding, into a quorum queue of its own."""
        self._backlog = await self._queue()
        body = stamped_body()
        await in_flight(count, 256, lambda: self._publish(self._backlog, body))

    async def consume(self, count: int) -> None:
        """A consumer with a prefetch of 256, acknowledging each message."""
        done = asyncio.Event()
        consumed = 0

        async def received(message: AbstractIncomingMessage) -> None:
            nonlocal consumed
            await message.ack()
            consumed += 1
            if consumed >= count:
                done.set()

        channel, _ = await self._consumer(self._backlog, received)
        try:
            await asyncio.wait_for(done.wait(), 600)
        finally:
            await channel.close()

    async def latency(self, rate: int, seconds: float) -> list[float]:
        """A consumer with a prefetch of 256, acknowledging each message while sends go out."""
        queue = await self._queue()
        total = int(rate * seconds)
        probe = LatencyProbe(total)

        async def received(message: AbstractIncomingMessage) -> None:
            probe.received(message.body)
            await message.ack()

        channel, _ = await self._consumer(queue, received)
        try:
            await paced(rate, total, lambda n: self._publish(queue, stamped_body(n)))
            return await probe.wait()
        finally:
            await channel.close()

    async def redelivery(self, count: int, rate: int, delay: float) -> list[float]:
        """A first delivery is republished to a TTL queue that dead-letters it back after
        ``delay``, then acknowledged."""
        queue = await self._queue()
        parking = await self._queue(
            {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue}
        )  # a classic queue: TTL expiry dead-letters back to the work queue
        probe = RedeliveryProbe(count, delay)

        async def received(message: AbstractIncomingMessage) -> None:
            if probe.first_delivery(message.body):
                await self._publish(parking, message.body, expiration=delay)
            await message.ack()

        channel, _ = await self._consumer(queue, received)
        try:
            await paced(rate, count, lambda n: self._publish(queue, stamped_body(n)))
            return await probe.wait()
        finally:
            await channel.close()
