"""What the dashboard's pages cost a broker with a large dead-letter queue (docs/benchmarks.md,
"Dashboard").

A group with no retries dead-letters every message of a 20,000-message backlog. Then: the front
page, a group's dead-letter page (first page of 50, each with its last error from the attempt
history), and a filter no dead letter matches (every one examined, its history read). While each
page is built, a second client asks ``/healthz`` every 5 ms: its slowest answer is how long the
page held the event loop from others.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from pocketmq.bench.broker import BenchResult, in_flight
from pocketmq.client import Admin, ConsumeStatus, Message, MessageView, Producer, PushConsumer
from pocketmq.testing import BrokerProcess

__all__ = ["run_dashboard"]

LETTERS = 20_000


def _get(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as reply:
        reply.read()
    return time.perf_counter() - started


async def _timed_with_probe(url: str, probe: str) -> tuple[float, float]:
    """(the page's wall seconds, the slowest /healthz answer meanwhile)."""
    page = asyncio.create_task(asyncio.to_thread(_get, url))
    worst = 0.0
    while not page.done():
        worst = max(worst, await asyncio.to_thread(_get, probe))
        await asyncio.sleep(0.005)
    return await page, worst


async def _fill(address: str) -> None:
    async with Admin(servers=address) as admin:
        await admin.create_topic("dash", queues=4)
        await admin.create_group("dash-failing", max_retries=0)
    async with Producer(servers=address) as producer:
        message = Message(topic="dash", body=b'{"order": 1}', tag="t", keys=("k",))
        await in_flight(LETTERS, 256, lambda: producer.send(message))
    seen = 0
    all_seen = asyncio.Event()

    async def refuse(messages: list[MessageView]) -> ConsumeStatus:
        nonlocal seen
        seen += len(messages)
        if seen >= LETTERS:
            all_seen.set()
        return ConsumeStatus.RECONSUME_LATER

    async with PushConsumer("dash-failing", "dash", refuse, servers=address):
        await all_seen.wait()
        await asyncio.sleep(2.0)  # the last send-backs reach the DLQ


async def run_dashboard(server: str | None = None) -> list[BenchResult]:
    """Pages over a 20k dead-letter queue (module doc); ``server`` is ignored."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-", dir=".") as tmp:
        broker = BrokerProcess(
            Path(tmp), grpc_port=None, http_port=0, extra_args=("--log-level", "warning")
        )
        try:
            await _fill(broker.address)
            base = f"http://{broker.http}"
            probe = f"{base}/healthz"
            cases = {
                "front page (groups by trouble)": f"{base}/",
                "DLQ page 1 of 20k": f"{base}/groups/dash-failing/dlq",
                "DLQ filter matching none (20k examined)": (
                    f"{base}/groups/dash-failing/dlq?error=zz"
                ),
            }
            results = []
            for name, url in cases.items():
                runs = [await _timed_with_probe(url, probe) for _ in range(5)]
                walls = sorted(w for w, _ in runs)
                results.append(
                    BenchResult(
                        name,
                        len(runs),
                        sum(walls),
                        0.0,
                        0.0,
                        {
                            "wall_p50_ms": statistics.median(walls) * 1000,
                            "wall_max_ms": walls[-1] * 1000,
                            "healthz_max_ms": max(h for _, h in runs) * 1000,
                        },
                    )
                )
        finally:
            broker.stop()
    return results
