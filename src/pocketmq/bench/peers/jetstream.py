"""NATS JetStream with file storage (acknowledged before fsync, as pocketmq's async flush): the
machine's running ``nats-server -js``; the nats-py client."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import urllib.parse
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import StorageType

from pocketmq.bench.broker import in_flight
from pocketmq.bench.peers.workload import (
    LatencyProbe,
    Peer,
    RedeliveryProbe,
    paced,
    processes_named,
    stamped_body,
)

__all__ = ["JetStreamPeer"]


class JetStreamPeer(Peer):
    """One file-backed stream per workload (deleted at the end); a pull consumer fetching 256 at a
    time for the backlog, push consumers for latency and redelivery (``nak`` with a delay)."""

    name = "NATS JetStream"
    durability = "file storage, fsync every 2 minutes"

    def __init__(self, url: str = "nats://127.0.0.1:4222") -> None:
        self._url = url
        self._connection: Any = None
        self._names = itertools.count()
        self._prefix = f"PEERS{os.getpid()}"
        self._streams: list[str] = []

    @property
    def server_pids(self) -> list[int]:
        """The running ``nats-server`` processes."""
        return processes_named("nats-server")

    async def start(self) -> None:
        """Connect to the running server (a refused port fails at once, a silent one in 5 s)."""
        where = urllib.parse.urlsplit(self._url)
        try:  # fail fast when nothing listens
            _, writer = await asyncio.open_connection(where.hostname, where.port or 4222)
            writer.close()
        except OSError as exc:
            raise OSError(f"NATS is not reachable at {self._url}: {exc}") from exc
        try:  # nats-py retries a refused first connection for ever: wait for it only so long
            self._connection = await asyncio.wait_for(
                nats.connect(self._url, allow_reconnect=False, max_reconnect_attempts=0), 5
            )
        except Exception as exc:  # nats-py raises its own errors, or the wait times out
            raise OSError(f"NATS is not reachable at {self._url}: {exc!r}") from exc
        self._js = self._connection.jetstream()

    async def close(self) -> None:
        """Delete the streams this benchmark created and disconnect."""
        if self._connection is None:
            return
        for stream in self._streams:
            with contextlib.suppress(Exception):  # best effort: the figures are already taken
                await self._js.delete_stream(stream)
        await self._connection.close()
        self._connection = None

    async def _stream(self) -> str:
        """A new stream; its one subject has the same name."""
        name = f"{self._prefix}_{next(self._names)}"
        await self._js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
        self._streams.append(name)
        return name

    async def publish_each(self, count: int) -> None:
        """``js.publish`` awaited one by one (each waits for its ``PubAck``)."""
        subject = await self._stream()
        for n in range(count):
            await self._js.publish(subject, stamped_body(n))

    async def publish_in_flight(self, count: int, width: int) -> None:
        """``publish_async`` with at most ``width`` acknowledgements outstanding (JetStream's own
        windowed publish, how its users send many at once; docs/benchmarks.md, "Each system at
        its own fastest"); every acknowledgement is checked."""
        subject = await self._stream()
        body = stamped_body()
        js = self._connection.jetstream(publish_async_max_pending=width)
        acks = [await js.publish_async(subject, body) for _ in range(count)]
        await js.publish_async_completed()
        for ack in acks:
            ack.result()  # raises what the server answered, if it refused one

    async def fill(self, count: int) -> None:
        """``js.publish`` with 256 outstanding, into a stream of its own."""
        self._backlog = await self._stream()
        body = stamped_body()
        await in_flight(count, 256, lambda: self._js.publish(self._backlog, body))

    async def consume(self, count: int) -> None:
        """A durable pull consumer: ``fetch(256)``, then ``ack`` each message."""
        subscription = await self._js.pull_subscribe(self._backlog, durable="c")
        consumed = 0
        while consumed < count:
            messages = await subscription.fetch(256, timeout=5)
            for message in messages:
                await message.ack()
            consumed += len(messages)

    async def latency(self, rate: int, seconds: float) -> list[float]:
        """A durable push consumer acknowledging each message."""
        subject = await self._stream()
        total = int(rate * seconds)
        probe = LatencyProbe(total)

        async def received(message: Msg) -> None:
            probe.received(message.data)
            await message.ack()

        subscription = await self._js.subscribe(subject, durable="c", cb=received, manual_ack=True)
        try:
            await paced(rate, total, lambda n: self._js.publish(subject, stamped_body(n)))
            return await probe.wait()
        finally:
            await subscription.unsubscribe()

    async def redelivery(self, count: int, rate: int, delay: float) -> list[float]:
        """A durable push consumer answering a first delivery with ``nak(delay)``."""
        subject = await self._stream()
        probe = RedeliveryProbe(count, delay)

        async def received(message: Msg) -> None:
            if probe.first_delivery(message.data):
                await message.nak(delay=delay)
            else:
                await message.ack()

        subscription = await self._js.subscribe(subject, durable="c", cb=received, manual_ack=True)
        try:
            await paced(rate, count, lambda n: self._js.publish(subject, stamped_body(n)))
            return await probe.wait()
        finally:
            await subscription.unsubscribe()
