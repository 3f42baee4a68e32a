"""End-to-end benchmarks: a real broker process and a client process, 1 KiB messages.

Every case reports messages per second and the CPU seconds each process spent (client: this
process; broker: read from /proc), because one CPython process uses at most one core and the
ratio shows which side is the bottleneck.
"""

from __future__ import annotations

import asyncio
import os
import resource
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pocketmq.client import (
    Admin,
    ConsumeStatus,
    Message,
    MessageView,
    Producer,
    ProducerConfig,
    PushConsumer,
    PushConsumerConfig,
    SendResult,
    SimpleConsumer,
)
from pocketmq.errors import TooManyRequestsError
from pocketmq.testing import BrokerProcess

__all__ = [
    "BenchResult",
    "Meter",
    "in_flight",
    "process_cpu",
    "run_consume",
    "run_delay",
    "run_fifo",
    "run_latency",
    "run_produce",
]

BODY = os.urandom(1024)

#: Seconds a backlog's refused send waits before it is tried again.
REFUSED_PAUSE = 0.05


@dataclass(slots=True)
class BenchResult:
    """One case's figures: both processes' CPU beside the rate, because one CPython process uses at
    most one core and the ratio shows which side limits.
    """

    case: str
    messages: int
    seconds: float
    client_cpu: float
    broker_cpu: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Messages per second of wall time."""
        return self.messages / self.seconds if self.seconds else 0.0


async def in_flight(
    count: int,
    width: int,
    send: Callable[[], Coroutine[Any, Any, object]],
    *,
    retry_refused: bool = True,
) -> int:
    """Run ``count`` sends keeping ``width`` in flight (a fixed pool of workers: an
    ``asyncio.Semaphore`` with thousands of waiters is itself the bottleneck on Python 3.11).

    A send the broker still refuses for flow control after the producer's own back-off
    (``TooManyRequestsError``, docs/semantics.md "Flow control") is counted, not raised: a loaded
    machine makes a throughput case report refusals instead of ending the whole run. With
    ``retry_refused`` (a backlog that must be complete) the send is tried again after a pause;
    without it (a throughput case) it is given up. Returns how many sends were refused.
    """
    share, extra = divmod(count, width)
    refused = 0

    async def worker(n: int) -> None:
        nonlocal refused
        for _ in range(n):
            while True:
                try:
                    await send()
                except TooManyRequestsError:
                    refused += 1
                    if retry_refused:
                        await asyncio.sleep(REFUSED_PAUSE)
                        continue
                break

    await asyncio.gather(*(worker(share + (1 if i < extra else 0)) for i in range(width)))
    return refused


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from /proc (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def own_cpu() -> float:
    """CPU seconds (user + system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """Wall time and both sides' CPU over a measured section (the server side may be several
    processes: a peer broker's, or none when benchmarking a server started elsewhere)."""

    def __init__(self, broker_pid: int | Sequence[int] | None) -> None:
        if broker_pid is None:
            self._pids: tuple[int, ...] = ()
        elif isinstance(broker_pid, int):
            self._pids = (broker_pid,)
        else:
            self._pids = tuple(broker_pid)

    def _server_cpu(self) -> float:
        return sum(process_cpu(pid) for pid in self._pids)

    def __enter__(self) -> Meter:
        self.wall = time.perf_counter()
        self.cpu = own_cpu()
        self.broker = self._server_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.wall
        self.client_cpu = own_cpu() - self.cpu
        self.broker_cpu = self._server_cpu() - self.broker

    def result(self, case: str, messages: int, **extra: float) -> BenchResult:
        """The figures of the measured section, for ``case``."""
        return BenchResult(case, messages, self.seconds, self.client_cpu, self.broker_cpu, extra)


@asynccontextmanager
async def bench_broker(
    server: str | None, flush: str = "async"
) -> AsyncIterator[tuple[str, int | None]]:
    """Use ``server``, or start a broker process in a temp dir (yields address and pid)."""
    if server:
        yield server, None
        return
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-", dir=".") as tmp:
        process = BrokerProcess(
            Path(tmp),
            flush=flush,
            grpc_port=None,
            config={"broker": {"record_history": False}},
            extra_args=("--log-level", "warning"),
        )
        try:
            assert process.process is not None
            yield process.address, process.process.pid
        finally:
            process.stop()


async def _topic(
    address: str,
    name: str,
    *,
    queues: int = 8,
    kind: str = "normal",
    group: str | None = None,
    fifo: bool = False,
) -> None:
    async with Admin(servers=address) as admin:
        await admin.create_topic(name, queues=queues, topic_type=kind)
        if group:
            await admin.create_group(group, fifo=fifo)


async def run_produce(server: str | None = None, count: int = 100_000) -> list[BenchResult]:
    """Send throughput: one at a time, pipelined, and auto-batched, so the cost of waiting and of
    batching can be told apart.
    """
    results: list[BenchResult] = []
    async with bench_broker(server) as (address, pid):
        await _topic(address, "bench-produce")
        message = Message(topic="bench-produce", body=BODY)
        unbatched = ProducerConfig(batching=False)
        async with Producer(servers=address, config=unbatched) as producer:
            await producer.send(message)  # warm up the route and connection
            each = max(1000, count // 20)
            with Meter(pid) as meter:
                for _ in range(each):
                    await producer.send(message)
            results.append(meter.result("await each send", each))
            with Meter(pid) as meter:
                refused = await in_flight(
                    count // 2, 512, lambda: producer.send(message), retry_refused=False
                )
            results.append(
                _sent(meter, "pipelined, unbatched (512 in flight)", count // 2, refused)
            )
        async with Producer(servers=address) as adaptive:  # the default: adaptive batching
            await adaptive.send(message)
            with Meter(pid) as meter:
                refused = await in_flight(
                    count // 2, 512, lambda: adaptive.send(message), retry_refused=False
                )
            results.append(
                _sent(meter, "pipelined, default (adaptive batching)", count // 2, refused)
            )
        config = ProducerConfig(linger=0.002, max_batch=256)
        async with Producer(servers=address, config=config) as batching:
            await batching.send(message)
            with Meter(pid) as meter:
                refused = await in_flight(
                    count, 4096, lambda: batching.send(message), retry_refused=False
                )
            results.append(_sent(meter, "auto-batching (linger 2 ms, 256/batch)", count, refused))
    return results


def _sent(meter: Meter, case: str, attempted: int, refused: int) -> BenchResult:
    """A throughput case's figures counting only the sends the broker took; refusals, if any,
    are reported beside them (``refused=N``)."""
    extra = {"refused": float(refused)} if refused else {}
    return meter.result(case, attempted - refused, **extra)


async def run_consume(server: str | None = None, count: int = 100_000) -> list[BenchResult]:
    """Consume throughput of a 100k backlog: push consumer with offset commits, and pop with batch
    acks.
    """
    results: list[BenchResult] = []
    async with bench_broker(server) as (address, pid):
        await _topic(address, "bench-consume", group="bench-push")
        async with Admin(servers=address) as admin:
            await admin.create_group("bench-pop")
        async with Producer(
            servers=address, config=ProducerConfig(linger=0.002, max_batch=256)
        ) as producer:
            fill = Message(topic="bench-consume", body=BODY)
            await in_flight(count, 4096, lambda: producer.send(fill))
        done = asyncio.Event()
        consumed = 0

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            nonlocal consumed
            consumed += len(messages)
            if consumed >= count:
                done.set()
            return ConsumeStatus.SUCCESS

        config = PushConsumerConfig(batch_size=32, pull_batch=64, report_outcomes=False)
        with Meter(pid) as meter:
            async with PushConsumer(
                "bench-push", "bench-consume", listener, servers=address, config=config
            ):
                await asyncio.wait_for(done.wait(), 600)
        results.append(meter.result("push consumer, 100k backlog (offset commits)", consumed))
        received = 0
        with Meter(pid) as meter:
            async with SimpleConsumer(
                "bench-pop", "bench-consume", servers=address, await_duration=1
            ) as pop:
                while received < count:
                    batch = await pop.receive(256, invisible_duration=60)
                    if not batch:
                        break
                    await pop.ack_many(batch)
                    received += len(batch)
        results.append(meter.result("simple consumer, receive 256 + batch ack", received))
    return results


async def run_latency(
    server: str | None = None, rate: int = 2000, seconds: float = 10.0
) -> list[BenchResult]:
    """End-to-end latency at a steady send rate (not flat out): what a consumer sees under normal
    load.
    """
    async with bench_broker(server) as (address, pid):
        await _topic(address, "bench-latency", group="bench-latency", queues=4)
        latencies: list[float] = []
        total = int(rate * seconds)
        warmup = min(500, total)  # first sends pay for connections, routes and cold caches
        all_in = asyncio.Event()

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            now = time.perf_counter()
            for message in messages:
                if "warmup" not in message.properties:
                    latencies.append(now - float(message.properties["t"]))
            if len(latencies) >= total:
                all_in.set()
            return ConsumeStatus.SUCCESS

        config = PushConsumerConfig(report_outcomes=False)
        async with (
            PushConsumer(
                "bench-latency", "bench-latency", listener, servers=address, config=config
            ),
            Producer(servers=address) as producer,
        ):
            await asyncio.sleep(0.5)
            interval = 1.0 / rate
            for _ in range(warmup):
                warm = Message(topic="bench-latency", body=BODY, properties={"warmup": "1"})
                await producer.send(warm)
                await asyncio.sleep(interval)
            await asyncio.sleep(0.5)
            with Meter(pid) as meter:
                start = time.perf_counter()
                pending: set[asyncio.Task[SendResult]] = set()  # only the unfinished ones,
                for n in range(total):  # so the heap (and GC pauses) stays as small as a user's
                    target = start + n * interval
                    delay = target - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    task = producer.send_async(
                        Message(
                            topic="bench-latency",
                            body=BODY,
                            properties={"t": repr(time.perf_counter())},
                        )
                    )
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                await asyncio.gather(*pending)
                await asyncio.wait_for(all_in.wait(), 60)
        ordered = sorted(latencies)
        return [
            meter.result(
                f"end-to-end latency at {rate} msg/s",
                total,
                p50_ms=ordered[len(ordered) // 2] * 1000,
                p99_ms=ordered[int(len(ordered) * 0.99)] * 1000,
                max_ms=ordered[-1] * 1000,
            )
        ]


async def run_delay(
    server: str | None = None, rate: int = 1000, seconds: float = 5.0, delay: float = 1.0
) -> list[BenchResult]:
    """Redelivery accuracy of delayed messages: actual arrival minus the requested time."""
    async with bench_broker(server) as (address, pid):
        await _topic(address, "bench-delay", group="bench-delay", queues=4)
        errors: list[float] = []
        total = int(rate * seconds)
        all_in = asyncio.Event()

        async def listener(messages: list[MessageView]) -> ConsumeStatus:
            now = time.time()
            for message in messages:
                errors.append(now - float(message.properties["due"]))
            if len(errors) >= total:
                all_in.set()
            return ConsumeStatus.SUCCESS

        config = PushConsumerConfig(report_outcomes=False)
        async with (
            PushConsumer("bench-delay", "bench-delay", listener, servers=address, config=config),
            Producer(servers=address) as producer,
        ):
            with Meter(pid) as meter:
                start = time.perf_counter()
                pending: set[asyncio.Task[SendResult]] = set()  # only the unfinished ones,
                for n in range(total):  # so the heap (and GC pauses) stays as small as a user's
                    pause = start + n / rate - time.perf_counter()
                    if pause > 0:
                        await asyncio.sleep(pause)
                    due = time.time() + delay
                    task = producer.send_async(
                        Message(
                            topic="bench-delay",
                            body=BODY,
                            delivery_time=due,
                            properties={"due": repr(due)},
                        )
                    )
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                await asyncio.gather(*pending)
                await asyncio.wait_for(all_in.wait(), 60)
        ordered = sorted(abs(e) for e in errors)
        return [
            meter.result(
                f"{delay:g} s delay at {rate} msg/s: delivery error",
                total,
                p50_ms=ordered[len(ordered) // 2] * 1000,
                p99_ms=ordered[int(len(ordered) * 0.99)] * 1000,
                early=float(sum(e < -0.001 for e in errors)),
            )
        ]


async def run_fifo(
    server: str | None = None, groups: int = 1000, per_group: int = 50
) -> list[BenchResult]:
    """FIFO throughput with many message groups, with and without a poison group per queue."""
    async with bench_broker(server) as (address, pid):
        return [
            await _fifo_case(address, pid, groups, per_group, poison=False),
            await _fifo_case(address, pid, groups, per_group, poison=True),
        ]


async def _fifo_case(
    address: str, pid: int | None, groups: int, per_group: int, *, poison: bool
) -> BenchResult:
    name = "bench-fifo-poison" if poison else "bench-fifo"
    await _topic(address, name, kind="fifo", group=name, fifo=True)
    async with Producer(servers=address, config=ProducerConfig(linger=0.002)) as producer:
        if poison:  # groups that always fail, at the head of every queue
            for q in range(64):
                await producer.send(
                    Message(topic=name, body=b"poison", message_group=f"poison-{q}")
                )

        async def send_group(g: int) -> None:  # serial within a group keeps its order
            for _ in range(per_group):
                await producer.send(Message(topic=name, body=BODY, message_group=f"group-{g}"))

        await asyncio.gather(*(send_group(g) for g in range(groups)))
    total = groups * per_group
    done = asyncio.Event()
    consumed = 0

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        nonlocal consumed
        if messages[0].body == b"poison":
            return ConsumeStatus.RECONSUME_LATER
        consumed += 1
        if consumed >= total:
            done.set()
        return ConsumeStatus.SUCCESS

    config = PushConsumerConfig(orderly=True, concurrency=64, report_outcomes=False)
    async with PushConsumer(name, name, listener, servers=address, config=config):
        with Meter(pid) as meter:  # until every healthy message is consumed
            await asyncio.wait_for(done.wait(), 600)
    label = f"{groups} groups, orderly push" + (", poison group on every queue" if poison else "")
    return meter.result(label, total)


BENCHES: dict[str, Callable[..., Coroutine[Any, Any, list[BenchResult]]]] = {
    "produce": run_produce,
    "consume": run_consume,
    "latency": run_latency,
    "delay": run_delay,
    "fifo": run_fifo,
}
