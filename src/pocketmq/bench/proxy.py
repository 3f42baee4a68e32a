"""The proxy tier measured (issue 15; docs/benchmarks.md "The proxy tier").

Official RocketMQ 5 Python producers, each in its own process, send 1 KiB messages as fast as
they can (``send_async`` with a window of sends outstanding) to a default broker whose gRPC port
is served either by the broker process itself (``--grpc-workers 0``, the default) or by proxy
workers (``--grpc-workers N``). Both run in the same invocation, alternating, and the report
gives the throughput ratio, each process's CPU per message (clients, broker, workers), and the
send latency of one paced producer at a fixed rate.

Run ``pocketmq bench proxy --help`` (or ``python -m pocketmq.bench.proxy``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pocketmq.bench.broker import own_cpu, process_cpu
from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

__all__ = ["ProxyRun", "main", "run_proxy_bench"]

BODY = b"x" * 1024


@dataclass(frozen=True, slots=True)
class ProxyRun:
    """One configuration's figures in one round."""

    workers: int
    messages: int
    seconds: float
    client_cpu: float  # CPU seconds of all producer processes
    broker_cpu: float
    worker_cpu: float
    p50_ms: float
    p99_ms: float

    @property
    def per_second(self) -> float:
        """Acknowledged sends per second of wall time, all producers together."""
        return self.messages / self.seconds

    def micros(self, cpu: float) -> float:
        """CPU microseconds per acknowledged message."""
        return cpu / self.messages * 1e6 if self.messages else 0.0


def _message(topic: str) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = BODY
    return message


def _producer(endpoint: str, topic: str) -> Any:
    from rocketmq import ClientConfiguration, Credentials, Producer

    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    return producer


def _flood(
    endpoint: str, topic: str, seconds: float, window: int, ready: Any, go: Any, out: Any
) -> None:
    """One producer process: warm up, wait for ``go``, keep ``window`` sends outstanding for
    ``seconds``."""
    producer = _producer(endpoint, topic)
    slots = threading.BoundedSemaphore(window)
    acked = [0]
    failed = [0]
    lock = threading.Lock()

    def finished(future: concurrent.futures.Future[Any]) -> None:
        with lock:
            if future.exception() is None:
                acked[0] += 1
            else:
                failed[0] += 1
        slots.release()

    for _ in range(window):  # warm up: connections, routes
        producer.send(_message(topic))
    ready.put(True)
    go.wait()
    cpu_before = own_cpu()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        slots.acquire()
        producer.send_async(_message(topic)).add_done_callback(finished)
    for _ in range(window):
        slots.acquire()
    out.put((acked[0], failed[0], own_cpu() - cpu_before))
    producer.shutdown()


def _paced(endpoint: str, topic: str, rate: float, seconds: float) -> list[float]:
    """Send latencies (ms) of one producer sending ``rate`` messages a second."""
    producer = _producer(endpoint, topic)
    latencies: list[float] = []
    lock = threading.Lock()
    try:
        for _ in range(50):
            producer.send(_message(topic))
        started = time.perf_counter()
        total = int(rate * seconds)
        done = threading.Semaphore(0)
        for number in range(total):
            due = started + number / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)

            def finished(future: Any, due: float = due) -> None:
                with lock:
                    latencies.append((time.perf_counter() - due) * 1000)
                done.release()

            producer.send_async(_message(topic)).add_done_callback(finished)
        for _ in range(total):
            done.acquire()
    finally:
        producer.shutdown()
    return latencies


def _children(pid: int) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-P", str(pid), "-f", "pocketmq proxy"], capture_output=True, text=True
    )
    return [int(p) for p in found.stdout.split()]


def _one_run(
    workers: int, producers: int, window: int, seconds: float, rate: float, paced_seconds: float
) -> ProxyRun:
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-proxy-") as tmp:
        config = {"server": {"grpc_workers": workers}} if workers else None
        broker = BrokerProcess(Path(tmp), config=config, extra_args=("--log-level", "warning"))
        try:
            assert broker.process is not None
            topic = "bench-proxy"
            with SyncAdmin(servers=broker.native) as admin:
                admin.create_topic(topic, queues=8)
            helpers = _children(broker.process.pid)
            context = multiprocessing.get_context("spawn")
            results, ready, go = context.Queue(), context.Queue(), context.Event()
            processes = [
                context.Process(
                    target=_flood, args=(broker.grpc, topic, seconds, window, ready, go, results)
                )
                for _ in range(producers)
            ]
            for process in processes:
                process.start()
            for _ in processes:  # every producer connected and warm before the clock starts
                ready.get(timeout=120)
            go.set()
            broker_before = process_cpu(broker.process.pid)
            workers_before = sum(process_cpu(p) for p in helpers)
            started = time.perf_counter()
            reports = [results.get(timeout=seconds + 120) for _ in processes]
            elapsed = time.perf_counter() - started
            broker_cpu = process_cpu(broker.process.pid) - broker_before
            worker_cpu = sum(process_cpu(p) for p in helpers) - workers_before
            for process in processes:
                process.join(30)
            acked = sum(r[0] for r in reports)
            latencies = _paced(broker.grpc, topic, rate, paced_seconds)
            quantiles = statistics.quantiles(latencies, n=100)
            return ProxyRun(
                workers,
                acked,
                elapsed,
                sum(r[2] for r in reports),
                broker_cpu,
                worker_cpu,
                quantiles[49],
                quantiles[98],
            )
        finally:
            broker.stop()


def run_proxy_bench(
    *,
    worker_counts: tuple[int, ...] = (0, 2),
    rounds: int = 2,
    producers: int = 4,
    window: int = 64,
    seconds: float = 8.0,
    rate: float = 1000.0,
    paced_seconds: float = 5.0,
) -> list[ProxyRun]:
    """Every configuration ``rounds`` times, alternating (module doc)."""
    runs = []
    for _ in range(rounds):
        for workers in worker_counts:
            runs.append(_one_run(workers, producers, window, seconds, rate, paced_seconds))
    return runs


def report(runs: list[ProxyRun], console: Console) -> None:
    """A table of every run, then the ratio of each worker count's median to the default's."""
    table = Table(title="official producers (1 KiB, send_async) through the gRPC tier")
    for column in (
        "grpc workers",
        "msg/s",
        "client µs/msg",
        "broker µs/msg",
        "workers µs/msg",
        "p50 ms @rate",
        "p99 ms @rate",
    ):
        table.add_column(column, justify="right")
    for run in runs:
        table.add_row(
            str(run.workers),
            f"{run.per_second:,.0f}",
            f"{run.micros(run.client_cpu):.0f}",
            f"{run.micros(run.broker_cpu):.0f}",
            f"{run.micros(run.worker_cpu):.0f}",
            f"{run.p50_ms:.2f}",
            f"{run.p99_ms:.2f}",
        )
    console.print(table)
    medians = {
        workers: statistics.median(r.per_second for r in runs if r.workers == workers)
        for workers in {r.workers for r in runs}
    }
    base = medians.get(0)
    for workers, median in sorted(medians.items()):
        if workers and base:
            console.print(f"{workers} workers ÷ in-process: {median / base:.2f}× (median msg/s)")


def main(argv: list[str] | None = None) -> None:
    """``pocketmq bench proxy``."""
    parser = argparse.ArgumentParser(prog="pocketmq bench proxy", description=__doc__)
    parser.add_argument("--workers", default="0,2", help="worker counts to compare")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--window", type=int, default=64, help="sends outstanding per producer")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="the paced producer's rate")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON too")
    args = parser.parse_args(argv)
    runs = run_proxy_bench(
        worker_counts=tuple(int(n) for n in args.workers.split(",")),
        rounds=args.rounds,
        producers=args.producers,
        window=args.window,
        seconds=args.seconds,
        rate=args.rate,
    )
    report(runs, Console())
    if args.json:
        print(json.dumps([_as_dict(r) for r in runs]))


def _as_dict(run: ProxyRun) -> dict[str, Any]:
    return {name: getattr(run, name) for name in ProxyRun.__slots__}


if __name__ == "__main__":
    main()
