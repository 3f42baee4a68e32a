"""What the dashboard's chart history costs a loaded broker (docs/benchmarks.md, "Charts";
docs/operations.md, "Charts").

The same tree, side by side: a broker with the history off (``history_interval = 0``) and one
with it on at the default 10 s (and, as a stress case, every second), in alternating order over
three rounds, each taking paced sends of ``RATE`` messages a second from a separate process for
``SECONDS``. The broker holds 20 topics of 8 queues and 100 consumer groups with positions, so
every sample has real work. Figures: the broker's CPU over the measured window (percent of one
core), the rate the load reached, and the broker's own count of the time it spent sampling
(``pocketmq_chart_sample_seconds_total``), the exact cost beside the noisy difference.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pocketmq.bench.broker import BODY, BenchResult, process_cpu
from pocketmq.client import Admin, Message, Producer
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

__all__ = ["run_history"]

RATE = 20_000
SECONDS = 30.0
WARM_UP = 4.0
TOPICS, QUEUES, GROUPS = 20, 8, 100
CASES = (("history off", 0.0), ("history every 10 s", 10.0), ("history every 1 s", 1.0))


def load(address: str, rate: int, seconds: float) -> None:
    """Paced sends: ``rate`` messages a second over the topics for ``seconds`` (a fixed 10 ms
    beat, so a slow round does not shift the next); prints how many were sent."""

    async def go() -> int:
        sent = 0
        per_tick = rate // 100
        async with Producer(servers=address) as producer:
            messages = [Message(topic=f"history-{n}", body=BODY[:256]) for n in range(TOPICS)]
            beat = time.monotonic()
            deadline = beat + seconds
            while time.monotonic() < deadline:
                await asyncio.gather(
                    *(producer.send(messages[i % TOPICS]) for i in range(per_tick))
                )
                sent += per_tick
                beat += 0.01
                await asyncio.sleep(max(0.0, beat - time.monotonic()))
        return sent

    print(asyncio.run(go()), flush=True)


def _sampling_seconds(http: str) -> float:
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "pocketmq_chart_sample_seconds":
            return float(family.samples[0].value)
    return 0.0


async def _prepare(address: str) -> None:
    async with Admin(servers=address) as admin:
        for number in range(TOPICS):
            await admin.create_topic(f"history-{number}", queues=QUEUES)
        for number in range(GROUPS):
            group = f"history-group-{number}"
            await admin.create_group(group)
            topic = f"history-{number % TOPICS}"
            entries = [w.OffsetEntry(topic, q, 0) for q in range(QUEUES)]
            await admin._call(
                address, RequestCode.COMMIT_OFFSET, w.CommitOffsetRequest(group, entries), w.Empty
            )


async def _one(interval: float) -> tuple[float, float, float, float]:
    """One broker under the load: (broker CPU %, messages/s reached, sampling %, seconds)."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-", dir=".") as tmp:
        broker = BrokerProcess(
            Path(tmp),
            grpc_port=None,
            http_port=0,
            config={"server": {"history_interval": interval}},
            extra_args=("--log-level", "warning"),
        )
        try:
            await _prepare(broker.address)
            assert broker.process is not None
            sender = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                f"from pocketmq.bench.history import load; "
                f"load({broker.address!r}, {RATE}, {SECONDS + WARM_UP + 1})",
                stdout=asyncio.subprocess.PIPE,
            )
            await asyncio.sleep(WARM_UP)
            cpu, sampling = process_cpu(broker.process.pid), _sampling_seconds(broker.http)
            started = time.perf_counter()
            await asyncio.sleep(SECONDS)
            elapsed = time.perf_counter() - started
            cpu = process_cpu(broker.process.pid) - cpu
            sampling = _sampling_seconds(broker.http) - sampling if interval else 0.0
            output, _ = await sender.communicate()
            sent = int(output.decode().split()[-1])
        finally:
            broker.stop()
    rate = sent / (SECONDS + WARM_UP + 1)
    return 100 * cpu / elapsed, rate, 100 * sampling / elapsed, elapsed


async def run_history(server: str | None = None) -> list[BenchResult]:
    """Three rounds of every case, alternating (module doc); ``server`` is ignored."""
    results = []
    order = list(CASES)
    for round_number in range(1, 4):
        for case, interval in order:
            cpu, rate, sampling, seconds = await _one(interval)
            results.append(
                BenchResult(
                    f"round {round_number}: {case}",
                    int(rate * seconds),
                    seconds,
                    0.0,
                    cpu * seconds / 100,
                    {"broker_cpu_percent": cpu, "sampling_cpu_percent": sampling},
                )
            )
        order.reverse()
    return results
