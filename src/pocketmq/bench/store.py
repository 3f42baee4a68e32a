"""Store throughput: 1 KiB records, async flush (unbatched, batched) and sync flush with 1, 16 and
64 concurrent writers (group commit). Writers are asyncio tasks waiting through the broker's
:class:`~pocketmq.broker.durability.DurabilityWaiter`, exactly as the broker waits for a sync flush.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from pocketmq.broker.durability import DurabilityWaiter
from pocketmq.store import FlushMode, MessageStore, PutStatus, StoreConfig, StoreMessage

__all__ = ["StoreBenchResult", "run_store_bench"]


@dataclass(frozen=True, slots=True)
class StoreBenchResult:
    """One store case: records and bytes per second and the CPU spent, the store alone in one
    process.
    """

    case: str
    records: int
    seconds: float
    cpu_seconds: float = 0.0

    @property
    def records_per_second(self) -> float:
        """Records appended per second of wall time."""
        return self.records / self.seconds

    @property
    def megabytes_per_second(self) -> float:
        """Payload megabytes (10^6 bytes of 1 KiB bodies) appended per second of wall time."""
        return self.records * 1024 / self.seconds / 1e6


def _messages(count: int, prefix: str) -> list[StoreMessage]:
    body = os.urandom(1024)
    return [
        StoreMessage(
            topic="bench",
            queue_id=i % 8,
            body=body,
            properties={"UNIQ_KEY": f"{prefix}{i:012X}", "TAGS": "T"},
        )
        for i in range(count)
    ]


def _async_case(directory: str, count: int, batch: int) -> StoreBenchResult:
    config = StoreConfig(flush_mode=FlushMode.ASYNC, min_free_disk_bytes=0)
    messages = _messages(count, f"A{batch}-")
    with MessageStore.open(directory, config) as store:
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(0, count, batch):
            results = store.append(messages[i : i + batch])
            if results[0].status is not PutStatus.PUT_OK:
                raise RuntimeError(results[0])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    label = "async, unbatched" if batch == 1 else f"async, batches of {batch}"
    return StoreBenchResult(label, count, seconds, cpu)


async def _sync_writers(store: MessageStore, messages: list[StoreMessage], writers: int) -> None:
    waiter = DurabilityWaiter(store, flush_timeout=5.0)

    async def writer(start: int) -> None:
        for i in range(start, len(messages), writers):
            [result] = store.append([messages[i]])
            if not await waiter.wait(result.physical_offset + result.size):
                raise RuntimeError("flush failed")

    await asyncio.gather(*(writer(n) for n in range(writers)))


def _sync_case(directory: str, count: int, writers: int) -> StoreBenchResult:
    config = StoreConfig(flush_mode=FlushMode.SYNC, min_free_disk_bytes=0)
    messages = _messages(count, f"S{writers}-")
    with MessageStore.open(directory, config) as store:
        started, cpu = time.perf_counter(), time.process_time()
        asyncio.run(_sync_writers(store, messages, writers))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return StoreBenchResult(f"sync, {writers} concurrent writer(s)", count, seconds, cpu)


def run_store_bench(directory: str | None = None, *, scale: float = 1.0) -> list[StoreBenchResult]:
    """Run every case in a fresh store under ``directory`` (a temp dir in the cwd by default)."""
    root = tempfile.mkdtemp(prefix="pocketmq-bench-", dir=directory or ".")
    cases: list[StoreBenchResult] = []
    try:
        plan: list[tuple[str, int, int]] = [
            ("async", int(200_000 * scale), 1),
            ("async", int(400_000 * scale), 16),
            ("async", int(400_000 * scale), 64),
            ("sync", int(3_000 * scale), 1),
            ("sync", int(20_000 * scale), 16),
            ("sync", int(40_000 * scale), 64),
        ]
        for n, (mode, count, width) in enumerate(plan):
            path = os.path.join(root, f"case-{n}")
            if mode == "async":
                cases.append(_async_case(path, count, width))
            else:
                cases.append(_sync_case(path, count, width))
            shutil.rmtree(path)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return cases
