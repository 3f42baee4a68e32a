"""What a Prometheus scrape costs a loaded broker (docs/benchmarks.md, "Metrics").

A broker with 50 topics of 8 queues and 20 consumer groups takes pipelined sends from a separate
process (512 in flight, 20–30k msg/s here, for 12 s) while this process scrapes ``/metrics``
every 0.25 s. Figures: the scrape's wall time as the scraper sees it, and
how long building the page held the broker's event loop (``pocketmq_scrape_seconds``).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pocketmq.bench.broker import BODY, BenchResult, in_flight
from pocketmq.client import Admin, Message, Producer
from pocketmq.testing import BrokerProcess

__all__ = ["run_scrape"]


def _scrape(url: str) -> tuple[float, float]:
    """One scrape: (wall seconds, the broker's own figure for the previous scrape)."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    wall = time.perf_counter() - started
    held = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "pocketmq_scrape_seconds":
            held = family.samples[0].value
    return wall, held


def load(address: str, seconds: float) -> None:
    """Pipelined sends (512 in flight) to ``address`` for ``seconds``: the scraped broker's load."""

    async def go() -> None:
        async with Producer(servers=address) as producer:
            message = Message(topic="scrape-0", body=BODY)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await in_flight(5120, 512, lambda: producer.send(message))

    asyncio.run(go())


async def run_scrape(server: str | None = None) -> list[BenchResult]:
    """Scrapes under load (module doc); ``server`` is ignored: the broker must serve HTTP."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-", dir=".") as tmp:
        broker = BrokerProcess(
            Path(tmp), grpc_port=None, http_port=0, extra_args=("--log-level", "warning")
        )
        try:
            async with Admin(servers=broker.address) as admin:
                for number in range(50):
                    await admin.create_topic(f"scrape-{number}", queues=8)
                for number in range(20):
                    await admin.create_group(f"scrape-group-{number}")
            url = f"http://{broker.http}/metrics"
            idle = [await asyncio.to_thread(_scrape, url) for _ in range(10)]
            load = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                f"from pocketmq.bench.scrape import load; load({broker.address!r}, 12.0)",
            )
            await asyncio.sleep(1.0)  # connected and sending
            busy: list[tuple[float, float]] = []
            while load.returncode is None and len(busy) < 40:
                busy.append(await asyncio.to_thread(_scrape, url))
                await asyncio.sleep(0.25)
            await load.wait()
        finally:
            broker.stop()
    results = []
    for case, samples in (("idle broker", idle), ("under pipelined sends", busy)):
        walls = sorted(w for w, _ in samples)
        held = [h for _, h in samples[1:]]
        results.append(
            BenchResult(
                case,
                len(samples),
                sum(walls),
                0.0,
                0.0,
                {
                    "wall_p50_ms": statistics.median(walls) * 1000,
                    "wall_max_ms": walls[-1] * 1000,
                    "loop_held_max_ms": max(held, default=0.0) * 1000,
                },
            )
        )
    return results
