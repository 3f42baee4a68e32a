"""pocketmq as a user runs it: ``pocketmq serve`` with its defaults (attempt history on, gRPC and
HTTP ports open, adaptive batching in the producer), the SDK's default configurations."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from pocketmq.bench.broker import in_flight
from pocketmq.bench.peers.workload import LatencyProbe, Peer, RedeliveryProbe, paced, stamped_body
from pocketmq.client import (
    Admin,
    ConsumeStatus,
    Message,
    MessageView,
    Producer,
    PushConsumer,
    PushConsumerConfig,
)
from pocketmq.testing import BrokerProcess

__all__ = ["PocketPeer"]


class PocketPeer(Peer):
    """A broker process in a temporary directory, started with ``--flush async`` (the default)
    or ``--flush sync``; each workload uses a topic and group of its own."""

    listener_batches = True

    def __init__(self, flush: str = "async") -> None:
        self.flush = flush
        self.name = f"pocketmq {flush}"
        self.durability = "acknowledged after fsync" if flush == "sync" else "fsync every 500 ms"
        self._process: BrokerProcess | None = None
        self._directory = ""
        self._names = itertools.count()

    @property
    def server_pids(self) -> list[int]:
        """The broker process, while it runs."""
        running = self._process.process if self._process else None
        return [running.pid] if running else []

    @property
    def _address(self) -> str:
        assert self._process is not None, "start() first"
        return self._process.address

    async def start(self) -> None:
        """Start ``pocketmq serve`` (its defaults; ``--flush sync`` for the sync variant)."""
        self._directory = tempfile.mkdtemp(prefix="pocketmq-peers-", dir=".")
        flush = None if self.flush == "async" else self.flush  # the default is not even named
        self._process = await asyncio.to_thread(
            BrokerProcess,
            Path(self._directory),
            flush=flush,
            http_port=0,
            extra_args=("--log-level", "warning"),
        )

    async def close(self) -> None:
        """Stop the broker and remove its data directory."""
        if self._process is not None:
            await asyncio.to_thread(self._process.stop)
            self._process = None
        if self._directory:
            shutil.rmtree(self._directory, ignore_errors=True)

    async def _topic(self, group: bool = False, retry_delays: tuple[float, ...] = ()) -> str:
        name = f"peers-{next(self._names)}"
        async with Admin(servers=self._address) as admin:
            await admin.create_topic(name)
            if group:
                await admin.create_group(
                    name, retry_delays=retry_delays, max_retries=len(retry_delays) or 16
                )
        return name

    async def _paced_while_consuming(
        self,
        topic: str,
        listener: Callable[[list[MessageView]], Awaitable[ConsumeStatus]],
        rate: int,
        count: int,
        until: Callable[[], Awaitable[list[float]]],
    ) -> list[float]:
        """Send ``count`` stamped messages at ``rate`` with the default ``Producer`` while the
        default ``PushConsumer`` of the topic's group hands them to ``listener``; consume on
        until ``until`` answers (a probe has seen every message)."""
        async with (
            PushConsumer(topic, topic, listener, servers=self._address),
            Producer(servers=self._address) as producer,
        ):
            await paced(
                rate, count, lambda n: producer.send(Message(topic=topic, body=stamped_body(n)))
            )
            return await until()

    async def publish_each(self, count: int) -> None:
        """The default ``Producer``, awaiting each ``send``."""
        topic = await self._topic()
        async with Producer(servers=self._address) as producer:
            for n in range(count):
                await producer.send(Message(topic=topic, body=stamped_body(n)))

    async def publish_in_flight(self, count: int, width: int) -> None:
        """The default ``Producer`` (adaptive batching) with ``width`` sends outstanding."""
        topic = await self._topic()
        message = Message(topic=topic, body=stamped_body())
        async with Producer(servers=self._address) as producer:
            await in_flight(count, width, lambda: producer.send(message))

    async def fill(self, count: int) -> None:
        """A topic and group of their own, filled through the default ``Producer``."""
        self._backlog = await self._topic(group=True)
        message = Message(topic=self._backlog, body=stamped_body())
        async with Producer(servers=self._address) as producer:
            await in_flight(count, 1024, lambda: producer.send(message))

    async def consume(self, count: int) -> None:
        """The default ``PushConsumer``: one message per listener call, outcomes reported."""
        await self._drain(count, None)

    async def consume_listener_batch(self, count: int, batch: int) -> None:
        """The ``PushConsumer`` with ``batch_size=batch``, everything else its default."""
        await self._drain(count, PushConsumerConfig(batch_size=batch))

    async def _drain(self, count: int, config: PushConsumerConfig | None) -> None:
        done = asyncio.Event()
        consumed = 0

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            nonlocal consumed
            consumed += len(messages)
            if consumed >= count:
                done.set()
            return ConsumeStatus.SUCCESS

        async with PushConsumer(
            self._backlog, self._backlog, listener, servers=self._address, config=config
        ):
            await asyncio.wait_for(done.wait(), 600)

    async def latency(self, rate: int, seconds: float) -> list[float]:
        """Default ``PushConsumer`` and ``Producer``; each send is its own task (open loop)."""
        topic = await self._topic(group=True)
        total = int(rate * seconds)
        probe = LatencyProbe(total)

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            for message in messages:
                probe.received(message.body)
            return ConsumeStatus.SUCCESS

        return await self._paced_while_consuming(topic, listener, rate, total, probe.wait)

    async def redelivery(self, count: int, rate: int, delay: float) -> list[float]:
        """A group whose first retry delay is ``delay``: the listener returns
        ``RECONSUME_LATER`` once."""
        topic = await self._topic(group=True, retry_delays=(delay,))
        probe = RedeliveryProbe(count, delay)

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            [message] = messages  # batch_size is 1 by default
            if probe.first_delivery(message.body):
                return ConsumeStatus.RECONSUME_LATER
            return ConsumeStatus.SUCCESS

        return await self._paced_while_consuming(topic, listener, rate, count, probe.wait)
