"""gRPC compatibility throughput: the official RocketMQ 5 Python client against pocketmq, beside
the native SDK doing the same work against the same broker.

A real ``pocketmq serve`` process is started (async flush, data in a temporary directory); the
clients run in this process, so broker and client each have their own interpreter and core. For
every case the table shows messages per second and the CPU both processes used, as a share of
one core (broker from ``/proc/<pid>/stat``, client from ``getrusage``; Linux only).

Cases (1 KiB bodies by default):

- official ``Producer.send()`` in a loop (one RPC per message, waiting for each);
- official ``Producer.send_async()`` with ``--in-flight`` sends outstanding;
- official ``SimpleConsumer``: ``receive(32)`` then one ``ack()`` per message (the client has no
  batch ack), acks spread over ``--ack-threads`` threads;
- official ``PushConsumer``: its own 20 consume threads, each acking what it consumed;
- native ``Producer.send()`` (asyncio) awaited one by one, with the same number in flight, and
  the same again with a 1 ms linger (the native producer then batches what is outstanding);
- native ``SimpleConsumer``: ``receive(32)`` then one ``ack_many()`` per batch.

Run ``pocketmq bench grpc --help`` (or ``python -m pocketmq.bench.grpc``); ``run_grpc_bench()``
returns the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from pocketmq.bench.broker import own_cpu, process_cpu
from pocketmq.client import Message as NativeMessage
from pocketmq.client import Producer, ProducerConfig, SimpleConsumer
from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

__all__ = ["GrpcBenchResult", "main", "run_grpc_bench"]

_OFFICIAL_TOPIC: Final = "bench-official"


@dataclass(frozen=True, slots=True)
class GrpcBenchResult:
    """One case's figures, with both processes' CPU (the broker's from /proc, this process's from
    getrusage).
    """

    case: str
    messages: int
    seconds: float
    broker_cpu: float  # CPU seconds the broker process used during the case
    client_cpu: float  # CPU seconds this (client) process used

    @property
    def per_second(self) -> float:
        """Messages per second of wall time."""
        return self.messages / self.seconds

    @property
    def broker_core_share(self) -> float:
        """The broker's CPU as a share of one core: near 100 % means the broker limits."""
        return self.broker_cpu / self.seconds

    @property
    def client_core_share(self) -> float:
        """This process's CPU as a share of one core: near 100 % means the client limits."""
        return self.client_cpu / self.seconds


def _measure(case: str, pid: int, count: int, work: Callable[[], None]) -> GrpcBenchResult:
    broker_before, client_before = process_cpu(pid), own_cpu()
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    return GrpcBenchResult(
        case,
        count,
        seconds,
        process_cpu(pid) - broker_before,
        own_cpu() - client_before,
    )


# -- the official client -------------------------------------------------------------------


def _official_message(topic: str, body: bytes) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    return message


def _official_sync_send(producer: Any, topic: str, body: bytes, count: int) -> None:
    for _ in range(count):
        producer.send(_official_message(topic, body))


def _official_async_send(
    producer: Any, topic: str, body: bytes, count: int, in_flight: int
) -> None:
    slots = threading.BoundedSemaphore(in_flight)
    failures: list[BaseException] = []
    done = threading.Event()
    remaining = [count]
    lock = threading.Lock()

    def finished(future: concurrent.futures.Future[Any]) -> None:
        if future.exception() is not None:
            failures.append(future.exception())  # type: ignore[arg-type]
        slots.release()
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    for _ in range(count):
        slots.acquire()
        producer.send_async(_official_message(topic, body)).add_done_callback(finished)
    done.wait()
    if failures:
        raise RuntimeError(f"{len(failures)} async sends failed: {failures[0]!r}")


def _official_receive_ack(consumer: Any, count: int, ack_threads: int) -> None:
    received = 0
    with concurrent.futures.ThreadPoolExecutor(ack_threads) as pool:
        while received < count:
            batch = consumer.receive(32, 60)
            received += len(batch)
            for future in [pool.submit(consumer.ack, m) for m in batch]:
                future.result()


def _official_push(
    endpoint: str, pid: int, group: str, topic: str, count: int
) -> tuple[float, float, float]:
    """Start a push consumer on a backlog of ``count``: the seconds from the first message to
    the last, and the broker's (process ``pid``) and this process's CPU seconds in that time."""
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    consumed = threading.Semaphore(0)

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            consumed.release()
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        ClientConfiguration(endpoint, Credentials()),
        group,
        Listener(),
        {topic: FilterExpression("*")},
    )
    consumer.startup()
    try:
        consumed.acquire()  # the first one arrives after the client's 1 s assignment scan
        broker_before, client_before = process_cpu(pid), own_cpu()
        started = time.perf_counter()
        for _ in range(count - 1):
            consumed.acquire()
        seconds = time.perf_counter() - started
        return seconds, process_cpu(pid) - broker_before, own_cpu() - client_before
    finally:
        consumer.shutdown()
        _shutdown_decode_pool(consumer)


def _shutdown_decode_pool(consumer: Any) -> None:
    # rocketmq-python-client 5.1.2 never shuts its consumers' decode pool down
    pool = getattr(consumer, "_Consumer__message_decode_executor", None)
    if pool is not None:
        pool.shutdown(wait=True)


# -- the native SDK (its asyncio API, as an application would use it) -----------------------


async def _native_sync_send(producer: Producer, topic: str, body: bytes, count: int) -> None:
    for _ in range(count):
        await producer.send(NativeMessage(topic=topic, body=body))


async def _native_async_send(
    producer: Producer, topic: str, body: bytes, count: int, in_flight: int
) -> None:
    slots = asyncio.Semaphore(in_flight)

    async def one() -> None:
        try:
            await producer.send(NativeMessage(topic=topic, body=body))
        finally:
            slots.release()

    tasks = []
    for _ in range(count):
        await slots.acquire()
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)


async def _native_receive_ack(consumer: SimpleConsumer, count: int) -> None:
    received = 0
    while received < count:
        batch = await consumer.receive(32, 60)
        await consumer.ack_many(batch)
        received += len(batch)


async def _native_cases(
    address: str, pid: int, body: bytes, sync_count: int, count: int, in_flight: int
) -> list[GrpcBenchResult]:
    topic = "bench-native"
    results: list[GrpcBenchResult] = []

    async def measure(case: str, number: int, work: Awaitable[None]) -> None:
        broker_before, client_before = process_cpu(pid), own_cpu()
        started = time.perf_counter()
        await work
        seconds = time.perf_counter() - started
        results.append(
            GrpcBenchResult(
                case,
                number,
                seconds,
                process_cpu(pid) - broker_before,
                own_cpu() - client_before,
            )
        )

    async with Producer(servers=address) as producer:
        await _native_sync_send(producer, topic, body, 200)  # warm up
        await measure(
            "native send()", sync_count, _native_sync_send(producer, topic, body, sync_count)
        )
        await measure(
            f"native send(), {in_flight} in flight",
            count,
            _native_async_send(producer, topic, body, count, in_flight),
        )
    async with Producer(servers=address, config=ProducerConfig(linger=0.001)) as producer:
        await measure(
            f"native send(), {in_flight} in flight, 1 ms linger (batches)",
            count,
            _native_async_send(producer, topic, body, count, in_flight),
        )
    backlog = 200 + sync_count + 2 * count
    async with SimpleConsumer(
        "bench-native-simple", topic, servers=address, await_duration=5
    ) as consumer:
        await measure(
            "native SimpleConsumer receive(32) + ack_many",
            backlog,
            _native_receive_ack(consumer, backlog),
        )
    return results


# -- the run -------------------------------------------------------------------------------


def run_grpc_bench(
    *,
    messages: int = 10_000,
    sync_messages: int = 2_000,
    body_size: int = 1024,
    in_flight: int = 256,
    ack_threads: int = 8,
    directory: str | None = None,
) -> list[GrpcBenchResult]:
    """Start a broker, run every case, stop the broker; the figures in case order."""
    from rocketmq import ClientConfiguration, Credentials

    body = os.urandom(body_size)
    root = tempfile.mkdtemp(prefix="pocketmq-bench-grpc-", dir=directory)
    results: list[GrpcBenchResult] = []
    try:
        with BrokerProcess(Path(root)) as broker:
            assert broker.process is not None
            pid = broker.process.pid
            _create_topics_and_groups(broker.native)
            configuration = ClientConfiguration(broker.grpc, Credentials())
            results.extend(
                _official_producer_cases(
                    configuration, pid, body, sync_messages, messages, in_flight
                )
            )
            backlog = 200 + sync_messages + messages
            # official simple consumer: take half the backlog, the push consumer the rest
            simple_count = backlog // 2
            results.append(_official_simple_case(configuration, pid, simple_count, ack_threads))
            results.append(_official_push_case(broker.grpc, pid, backlog))
            # native SDK, same broker
            results.extend(
                asyncio.run(
                    _native_cases(broker.native, pid, body, sync_messages, messages, in_flight)
                )
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def _create_topics_and_groups(address: str) -> None:
    """Every case's topic and group exists before the first client starts."""
    admin = SyncAdmin(servers=address)
    try:
        for name in ("official", "native"):
            admin.create_topic(f"bench-{name}", queues=8)
            admin.create_group(f"bench-{name}-simple")
        admin.create_group("bench-official-push")
    finally:
        admin.close()


def _official_producer_cases(
    configuration: Any, pid: int, body: bytes, sync_count: int, count: int, in_flight: int
) -> list[GrpcBenchResult]:
    """The official producer's ``send()`` one at a time, then ``send_async()`` with
    ``in_flight`` outstanding; 200 warm-up sends first."""
    from rocketmq import Producer as OfficialProducer

    producer = OfficialProducer(configuration, (_OFFICIAL_TOPIC,))
    producer.startup()
    try:
        _official_sync_send(producer, _OFFICIAL_TOPIC, body, 200)  # warm up
        return [
            _measure(
                "official send()",
                pid,
                sync_count,
                lambda: _official_sync_send(producer, _OFFICIAL_TOPIC, body, sync_count),
            ),
            _measure(
                f"official send_async(), {in_flight} in flight",
                pid,
                count,
                lambda: _official_async_send(producer, _OFFICIAL_TOPIC, body, count, in_flight),
            ),
        ]
    finally:
        producer.shutdown()


def _official_simple_case(
    configuration: Any, pid: int, count: int, ack_threads: int
) -> GrpcBenchResult:
    """The official simple consumer on half the backlog: ``receive(32)``, then one ``ack()``
    per message spread over ``ack_threads`` threads (the client has no batch ack)."""
    from rocketmq import FilterExpression
    from rocketmq import SimpleConsumer as OfficialSimpleConsumer

    consumer = OfficialSimpleConsumer(
        configuration,
        "bench-official-simple",
        {_OFFICIAL_TOPIC: FilterExpression("*")},
        5,
    )
    consumer.startup()
    try:
        return _measure(
            f"official SimpleConsumer receive(32) + ack, {ack_threads} ack threads",
            pid,
            count,
            lambda: _official_receive_ack(consumer, count, ack_threads),
        )
    finally:
        consumer.shutdown()
        _shutdown_decode_pool(consumer)


def _official_push_case(endpoint: str, pid: int, backlog: int) -> GrpcBenchResult:
    """The push consumer on what is left of the backlog. Its rate counts from the first
    message on (the client's assignment scan is not the broker's work), so it is timed by
    :func:`_official_push`, not :func:`_measure`, and so is the CPU of both sides: the same
    window (the scan's CPU counted against the consume's seconds once made a tiny case's
    broker CPU exceed its wall time)."""
    seconds, broker_cpu, client_cpu = _official_push(
        endpoint, pid, "bench-official-push", _OFFICIAL_TOPIC, backlog
    )
    return GrpcBenchResult(
        "official PushConsumer (20 consume threads, ack each)",
        backlog - 1,
        seconds,
        broker_cpu,
        client_cpu,
    )


def print_results(results: list[GrpcBenchResult], console: Console | None = None) -> None:
    """The figures as a table, CPU per message beside the rate (the steadier guide on a shared
    machine).
    """
    table = Table(title="gRPC (official client) vs native, 1 broker process + 1 client process")
    columns = ("case", "messages", "seconds", "msg/s", "broker CPU", "client CPU",
               "broker µs/msg", "client µs/msg")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "case" else "right")
    for r in results:
        table.add_row(
            r.case,
            f"{r.messages:,}",
            f"{r.seconds:.2f}",
            f"{r.per_second:,.0f}",
            f"{r.broker_core_share:.0%}",
            f"{r.client_core_share:.0%}",
            f"{r.broker_cpu / r.messages * 1e6:.0f}",
            f"{r.client_cpu / r.messages * 1e6:.0f}",
        )
    (console or Console(width=160)).print(table)


def main(argv: list[str] | None = None) -> None:
    """The command line (``pocketmq bench grpc``): parse ``argv``, run every case, print the
    table.
    """
    parser = argparse.ArgumentParser(
        prog="pocketmq bench grpc", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--messages", type=int, default=10_000, help="async sends (default 10000)")
    parser.add_argument("--sync-messages", type=int, default=2_000, help="sync sends")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument("--in-flight", type=int, default=256, help="async sends outstanding")
    parser.add_argument("--ack-threads", type=int, default=8, help="SimpleConsumer ack threads")
    parser.add_argument("--dir", default=None, help="where the broker's data goes (a temp dir)")
    args = parser.parse_args(argv)
    print_results(
        run_grpc_bench(
            messages=args.messages,
            sync_messages=args.sync_messages,
            body_size=args.size,
            in_flight=args.in_flight,
            ack_threads=args.ack_threads,
            directory=args.dir,
        )
    )


if __name__ == "__main__":
    main()
