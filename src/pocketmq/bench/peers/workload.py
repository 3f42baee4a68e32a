"""The workloads every system runs in ``pocketmq bench peers``, and what each system must provide.

Each system (pocketmq, Redis Streams, NATS JetStream, RabbitMQ) implements :class:`Peer` with its
own Python client on the same event loop; the runner measures the same five workloads on each
(docs/benchmarks.md, "Side by side with the peers"):

* publish, awaiting each acknowledgement;
* publish with 256 requests in flight;
* consume and acknowledge a backlog (for pocketmq also with :data:`LISTENER_BATCH` messages per
  listener call; the peers' clients have no such knob, their idiomatic consume is batched already);
* end-to-end latency at a steady rate (the body carries its send time);
* redelivery after a requested one second: the consumer refuses each message once and asks for it
  again in a second; the error is the actual redelivery time minus the requested one.
"""

from __future__ import annotations

import abc
import asyncio
import os
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = [
    "BODY_SIZE",
    "LISTENER_BATCH",
    "LatencyProbe",
    "Peer",
    "RedeliveryProbe",
    "Scale",
    "paced",
    "processes_named",
    "stamped_body",
]

BODY_SIZE = 1024
#: Messages per listener call in the "listener batch" consume row: issue 32's target is
#: pocketmq with ``PushConsumerConfig(batch_size=32)`` against Redis (docs/benchmarks.md).
LISTENER_BATCH = 32
_FILLER = os.urandom(BODY_SIZE)
_STAMP = struct.Struct("<dQ")  # send time (perf_counter) and a sequence number: 16 bytes


def stamped_body(sequence: int = 0) -> bytes:
    """A 1 KiB body whose first 16 bytes are the send time and a sequence number, so every
    system carries the latency probe the same way (no headers or properties needed)."""
    return _STAMP.pack(time.perf_counter(), sequence) + _FILLER[_STAMP.size :]


@dataclass(frozen=True, slots=True)
class Scale:
    """How much of each workload to run (``--scale`` multiplies the counts)."""

    publish_each: int = 5_000
    in_flight: int = 50_000
    width: int = 256
    backlog: int = 100_000
    latency_rate: int = 2_000
    latency_seconds: float = 5.0
    redeliveries: int = 500
    redelivery_rate: int = 250
    redelivery_delay: float = 1.0

    def scaled(self, factor: float) -> Scale:
        """The same workloads with every count (not the rates) multiplied by ``factor``."""
        return Scale(
            publish_each=max(10, int(self.publish_each * factor)),
            in_flight=max(self.width, int(self.in_flight * factor)),
            width=self.width,
            backlog=max(10, int(self.backlog * factor)),
            latency_rate=self.latency_rate,
            latency_seconds=max(0.5, self.latency_seconds * factor),
            redeliveries=max(5, int(self.redeliveries * factor)),
            redelivery_rate=self.redelivery_rate,
            redelivery_delay=self.redelivery_delay,
        )


async def paced(rate: int, total: int, send: Callable[[int], Awaitable[object]]) -> None:
    """Start ``total`` sends at ``rate`` per second without waiting for each (an open-loop load,
    as real producers are), then wait for all of them."""
    interval = 1.0 / rate
    start = time.perf_counter()
    pending: set[asyncio.Task[object]] = set()

    async def one(n: int) -> object:
        return await send(n)

    for n in range(total):
        delay = start + n * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.ensure_future(one(n))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)


def processes_named(command: str) -> list[int]:
    """Process ids whose command name is ``command`` (a peer server the benchmark did not start,
    for its CPU seconds; empty when none is visible)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().strip() == command:
                        found.append(int(entry))
            except OSError:
                continue
    return found


class LatencyProbe:
    """Collects send-to-receipt times of stamped bodies until ``expected`` have arrived; the first
    tenth is the warm-up (connections, routes, caches) and is left out of the figures."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self._warmup = expected // 10
        self._arrived = 0
        self.latencies: list[float] = []
        self.done = asyncio.Event()

    def received(self, body: bytes) -> None:
        """Note one message's arrival (call it as soon as the client hands the message over)."""
        sent, sequence = _STAMP.unpack_from(body)
        if sequence >= self._warmup:
            self.latencies.append(time.perf_counter() - sent)
        self._arrived += 1
        if self._arrived >= self.expected:
            self.done.set()

    async def wait(self, timeout: float = 120.0) -> list[float]:
        """The latencies after the warm-up, once all expected messages arrived."""
        await asyncio.wait_for(self.done.wait(), timeout)
        return self.latencies


class RedeliveryProbe:
    """Tells first deliveries from redeliveries (by the body's sequence number) and measures how
    late each redelivery came against the requested delay."""

    def __init__(self, expected: int, delay: float) -> None:
        self.expected = expected
        self.delay = delay
        self._refused: dict[int, float] = {}  # sequence -> when it was refused
        self._settled: set[int] = set()
        self.errors: list[float] = []
        self.done = asyncio.Event()

    def first_delivery(self, body: bytes) -> bool:
        """True (and the refusal time noted) when this is the message's first delivery: the
        consumer must then ask for it again after :attr:`delay`."""
        sequence = _STAMP.unpack_from(body)[1]
        if sequence in self._settled:
            return False
        refused = self._refused.pop(sequence, None)
        if refused is None:
            self._refused[sequence] = time.perf_counter()
            return True
        self.errors.append(time.perf_counter() - refused - self.delay)
        self._settled.add(sequence)
        if len(self.errors) >= self.expected:
            self.done.set()
        return False

    async def wait(self, timeout: float = 120.0) -> list[float]:
        """The errors, once every message came back."""
        await asyncio.wait_for(self.done.wait(), timeout)
        return self.errors


class Peer(abc.ABC):
    """One system under test. Every method runs one workload on a fresh stream, topic or queue and
    returns when it is complete; the runner times it and reads the CPU of :attr:`server_pids`."""

    #: Name in the report.
    name: str
    #: Which pocketmq configuration or peer it is compared with (docs/benchmarks.md).
    durability: str
    #: Whether the client hands a listener several messages per call on request, so the runner
    #: also measures :meth:`consume_listener_batch` (pocketmq only: the peers' consume loops
    #: take 256 at a time already and have no listener to batch for).
    listener_batches: bool = False

    @property
    @abc.abstractmethod
    def server_pids(self) -> list[int]:
        """The server's processes, for its CPU seconds (empty when they cannot be seen)."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the server or connect to the running one; raise ``OSError`` when unreachable."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Delete what the benchmark created and disconnect (stop the server if it was ours)."""

    @abc.abstractmethod
    async def publish_each(self, count: int) -> None:
        """Publish ``count`` messages, awaiting each acknowledgement before the next."""

    @abc.abstractmethod
    async def publish_in_flight(self, count: int, width: int) -> None:
        """Publish ``count`` messages keeping ``width`` acknowledgements outstanding."""

    @abc.abstractmethod
    async def fill(self, count: int) -> None:
        """Store a backlog of ``count`` messages for :meth:`consume` (not timed)."""

    @abc.abstractmethod
    async def consume(self, count: int) -> None:
        """Receive and acknowledge the ``count`` messages :meth:`fill` stored."""

    async def consume_listener_batch(self, count: int, batch: int) -> None:
        """Like :meth:`consume`, the listener handed ``batch`` messages per call; only where
        :attr:`listener_batches` says the client has that knob."""
        raise NotImplementedError(f"{self.name} has no listener batch size")

    @abc.abstractmethod
    async def latency(self, rate: int, seconds: float) -> list[float]:
        """Send at ``rate`` for ``seconds`` while consuming; each message's seconds from send to
        receipt."""

    @abc.abstractmethod
    async def redelivery(self, count: int, rate: int, delay: float) -> list[float]:
        """Refuse each of ``count`` messages once asking for it again after ``delay``; each
        redelivery's seconds late (negative: early)."""
