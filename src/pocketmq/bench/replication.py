"""Replication benchmarks: a broker group against a single broker, side by side in one run.

Every case starts its own processes (a name server, a master, a slave) in a temporary
directory, so the group and the single broker it is compared with run the same client code on
the same machine minutes apart; the cases alternate (single, group, single, group, ...) to
spread the machine's drift over both. Figures: pipelined sends of 1 KiB (512 in flight), the
replication latency under a paced load (the master's append-to-acknowledgement time), and the
catch-up rate of an empty slave (docs/benchmarks.md, "Replication").
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from pocketmq.bench.broker import BODY, BenchResult, Meter, in_flight, process_cpu
from pocketmq.client import Admin, Message, Producer
from pocketmq.testing import BrokerProcess, NameServerProcess

__all__ = ["run_replication"]

_QUIET: dict[str, Any] = {"record_history": False}


class _Group:
    """A name server, a master and (optionally) one slave, in one temporary directory."""

    def __init__(self, root: Path, *, replication: str | None, flush: str) -> None:
        self.namesrv = NameServerProcess(root / "namesrv")
        self.processes: list[BrokerProcess] = []
        broker = {**_QUIET, "replication": replication or "async"}
        common: dict[str, Any] = {
            "namesrv": self.namesrv.address,
            "broker_name": "bench",
            "flush": flush,
            "grpc_port": None,
            "config": {"broker": broker},
        }
        self.master = self._start(root / "master", common, ())
        self.slave: BrokerProcess | None = None
        if replication is not None:
            self.slave = self.add_slave(root, common)
        self._root, self._common = root, common

    def _start(self, path: Path, common: dict[str, Any], args: tuple[str, ...]) -> BrokerProcess:
        process = BrokerProcess(path, **common, extra_args=("--log-level", "warning", *args))
        self.processes.append(process)
        return process

    def add_slave(self, root: Path, common: dict[str, Any] | None = None) -> BrokerProcess:
        args = ("--broker-id", "1", "--master", self.master.ha)
        return self._start(root / "slave", common or self._common, args)

    def slave_cpu(self) -> float:
        """CPU seconds the slave has used so far (0 without one)."""
        if self.slave is None or self.slave.process is None:
            return 0.0
        return process_cpu(self.slave.process.pid)

    @property
    def master_pid(self) -> int | None:
        return self.master.process.pid if self.master.process else None

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.namesrv.stop()


@contextlib.contextmanager
def _group(replication: str | None, flush: str) -> Iterator[_Group]:
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-ha-", dir=".") as tmp:
        group = _Group(Path(tmp), replication=replication, flush=flush)
        try:
            yield group
        finally:
            group.close()


async def _status(address: str) -> dict[str, Any]:
    async with Admin(servers=address) as admin:
        for item in await admin.broker_status():
            if item.address == address:
                return dict(item.replication)
    return {}


@contextlib.asynccontextmanager
async def _producer(group: _Group) -> AsyncIterator[Producer]:
    async with Admin(servers=group.master.address) as admin:
        await admin.create_topic("bench-ha", queues=8)
    async with Producer(servers=group.namesrv.address) as producer:
        await producer.send(Message(topic="bench-ha", body=BODY))  # route and connection
        yield producer


async def _pipelined(label: str, replication: str | None, flush: str, count: int) -> BenchResult:
    with _group(replication, flush) as group:
        async with _producer(group) as producer:
            message = Message(topic="bench-ha", body=BODY)
            statuses: dict[str, int] = {}

            async def send() -> None:
                result = await producer.send(message)
                statuses[result.status.value] = statuses.get(result.status.value, 0) + 1

            slave_before = group.slave_cpu()
            with Meter(group.master_pid) as meter:
                await in_flight(count, 512, send)
            slave_cpu = group.slave_cpu() - slave_before
        weaker = sum(n for s, n in statuses.items() if s != "OK")
        extra = {"not_ok": float(weaker)}
        if group.slave is not None:
            extra["slave_cpu"] = slave_cpu
        return meter.result(label, count, **extra)


async def _lag(rate: int, seconds: float) -> BenchResult:
    """Paced sends at ``rate`` msg/s against an async group; the master measures each record's
    time from append to the slave's acknowledgement."""
    with _group("async", "async") as group:
        async with _producer(group) as producer:
            message = Message(topic="bench-ha", body=BODY)
            loop = asyncio.get_running_loop()
            total = int(rate * seconds)
            tick = 0.005  # send rate/200 messages every 5 ms
            per_tick = max(1, int(rate * tick))
            pending: set[asyncio.Future[Any]] = set()
            with Meter(group.master_pid) as meter:
                start = loop.time()
                sent = 0
                while sent < total:
                    for _ in range(min(per_tick, total - sent)):
                        future = asyncio.ensure_future(producer.send(message))
                        pending.add(future)
                        future.add_done_callback(pending.discard)
                    sent += per_tick
                    await asyncio.sleep(max(0.0, start + sent / rate - loop.time()))
                await asyncio.gather(*pending)
            latency = (await _status(group.master.address)).get("latency_ms", {})
        return meter.result(
            f"async group, paced {rate:,} msg/s: replication latency",
            total,
            p50_ms=latency.get("p50", -1.0),
            p99_ms=latency.get("p99", -1.0),
            max_ms=latency.get("max", -1.0),
        )


async def _catch_up(megabytes: int) -> BenchResult:
    """An empty slave beside a master holding ``megabytes`` of 32 KiB messages."""
    with _group(None, "async") as group:
        async with _producer(group) as producer:
            body = b"c" * (32 * 1024)
            for _ in range(megabytes):
                await producer.send_batch([Message(topic="bench-ha", body=body)] * 32)
        end = (await _status(group.master.address))["log_end"]
        started = time.perf_counter()
        with Meter(group.master_pid) as meter:
            slave = group.add_slave(Path(group.master.data_dir).parent)
            while True:  # polled: the slave's own status says how far it is
                if (await _status(slave.address)).get("log_end", 0) >= end:
                    break
                await asyncio.sleep(0.02)
        seconds = time.perf_counter() - started
        return meter.result(
            f"catch-up of an empty slave ({end / 2**20:,.0f} MiB)",
            end // 1024,
            mib_per_s=end / 2**20 / seconds,
        )


async def run_replication(
    server: str | None = None, count: int = 30_000, rounds: int = 2
) -> list[BenchResult]:
    """The replication figures of docs/benchmarks.md, alternating single and group runs
    ``rounds`` times (``server`` is not used: every case starts its own processes)."""
    del server
    results: list[BenchResult] = []
    for _ in range(rounds):
        results.append(await _pipelined("single broker, --flush sync", None, "sync", count))
        results.append(await _pipelined("group, SYNC replication", "sync", "async", count))
        results.append(await _pipelined("single broker, async flush", None, "async", count))
        results.append(await _pipelined("group, ASYNC replication", "async", "async", count))
    results.append(
        await _pipelined("group, SYNC replication + --flush sync", "sync", "sync", count)
    )
    results.append(await _lag(10_000, 5.0))
    results.append(await _lag(20_000, 5.0))
    results.append(await _catch_up(1024))
    return results
