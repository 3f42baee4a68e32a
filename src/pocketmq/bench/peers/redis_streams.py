"""Redis Streams with AOF ``everysec`` (acknowledged before fsync, as pocketmq's async flush):
a ``redis-server`` of the benchmark's own in a temporary directory, because the machine's shared
Redis keeps nothing on disk; redis-py's asyncio client."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import socket
import subprocess
import tempfile
from typing import Any

import redis.asyncio as redis

from pocketmq.bench.peers.workload import LatencyProbe, Peer, RedeliveryProbe, paced, stamped_body

__all__ = ["RedisPeer"]

_FIELD = b"b"
_CLAIM_EVERY = 0.010  # Redis has no delayed redelivery: a claimer polls XAUTOCLAIM this often


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisPeer(Peer):
    """One stream (and consumer group) per workload; one consumer, reading 256 at a time."""

    name = "Redis Streams"
    durability = "AOF, fsync every second"

    def __init__(self, executable: str = "redis-server") -> None:
        self._executable = executable
        self._server: subprocess.Popen[bytes] | None = None
        self._directory = ""
        self._names = itertools.count()
        self._client: redis.Redis | None = None

    @property
    def server_pids(self) -> list[int]:
        """The benchmark's own ``redis-server``."""
        return [self._server.pid] if self._server else []

    @property
    def _redis(self) -> redis.Redis:
        assert self._client is not None, "start() first"
        return self._client

    async def start(self) -> None:
        """Start ``redis-server`` with AOF ``everysec`` on a free port and wait for its
        ``PING``."""
        path = shutil.which(self._executable)
        if path is None:
            raise OSError(f"{self._executable} is not installed (Debian: redis-server)")
        self._directory = tempfile.mkdtemp(prefix="pocketmq-peers-redis-")
        port = _free_port()
        self._server = subprocess.Popen(  # noqa: ASYNC220 (starts at once; nothing waits)
            [path, "--port", str(port), "--bind", "127.0.0.1", "--dir", self._directory,
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
             "--logfile", f"{self._directory}/redis.log"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        # A bounded, blocking pool, as a Redis user sizes one: redis-py opens a connection per
        # concurrent command, so the open-loop latency workload's first sends, arriving while
        # the first connections were still being set up, opened hundreds more (p50 1-3 s in
        # every round of 2026-11-29, once MaxConnectionsError at 1,024). 64 connections are
        # plenty at 2,000 msg/s, and a command past them waits for a free one.
        pool = redis.BlockingConnectionPool(
            host="127.0.0.1", port=port, max_connections=64, timeout=None
        )
        self._client = redis.Redis.from_pool(pool)  # the client owns the pool: aclose() ends it
        for _ in range(100):
            try:
                await self._client.ping()
                return
            except redis.ConnectionError:
                await asyncio.sleep(0.05)
        raise OSError(f"redis-server did not answer on port {port}")

    async def close(self) -> None:
        """Close the client, stop the server, remove its directory."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._server is not None:
            self._server.terminate()
            await asyncio.to_thread(self._server.wait)
            self._server = None
        if self._directory:
            shutil.rmtree(self._directory, ignore_errors=True)

    async def _stream(self, group: bool = False) -> str:
        key = f"peers-{next(self._names)}"
        if group:
            await self._redis.xgroup_create(key, key, id="0", mkstream=True)
        return key

    async def publish_each(self, count: int) -> None:
        """``XADD`` awaited one by one."""
        key = await self._stream()
        for n in range(count):
            await self._redis.xadd(key, {_FIELD: stamped_body(n)})

    async def publish_in_flight(self, count: int, width: int) -> None:
        """``XADD`` in pipelines of ``width``, one after the other: how a Redis user sends many
        at once (one write and one read per pipeline; docs/benchmarks.md, "Each system at its
        own fastest")."""
        key = await self._stream()
        body: dict[Any, Any] = {_FIELD: stamped_body()}
        for start in range(0, count, width):
            pipe = self._redis.pipeline(transaction=False)
            for _ in range(min(width, count - start)):
                pipe.xadd(key, body)
            await pipe.execute()

    async def fill(self, count: int) -> None:
        """``XADD`` in pipelines of 1,000, into a stream with a consumer group."""
        self._backlog = await self._stream(group=True)
        body: dict[Any, Any] = {_FIELD: stamped_body()}
        for start in range(0, count, 1000):
            pipe = self._redis.pipeline(transaction=False)
            for _ in range(min(1000, count - start)):
                pipe.xadd(self._backlog, body)
            await pipe.execute()

    async def _read(self, key: str, block: int | None = None) -> list[tuple[bytes, bytes]]:
        """The next entries for consumer ``c`` (id, body), up to 256."""
        reply: Any = await self._redis.xreadgroup(key, "c", {key: ">"}, count=256, block=block)
        return [
            (entry_id, fields[_FIELD]) for _, entries in reply or () for entry_id, fields in entries
        ]

    async def consume(self, count: int) -> None:
        """``XREADGROUP`` 256 at a time, one ``XACK`` per read."""
        key, consumed = self._backlog, 0
        while consumed < count:
            entries = await self._read(key, block=1000)
            if entries:
                await self._redis.xack(key, key, *(entry_id for entry_id, _ in entries))
                consumed += len(entries)

    async def latency(self, rate: int, seconds: float) -> list[float]:
        """A blocking ``XREADGROUP`` loop (100 ms) acknowledging each read while sends go out."""
        key = await self._stream(group=True)
        total = int(rate * seconds)
        probe = LatencyProbe(total)

        async def consumer() -> None:
            while not probe.done.is_set():
                entries = await self._read(key, block=100)
                for _, body in entries:
                    probe.received(body)
                if entries:
                    await self._redis.xack(key, key, *(entry_id for entry_id, _ in entries))

        reading = asyncio.create_task(consumer())
        try:
            await paced(rate, total, lambda n: self._redis.xadd(key, {_FIELD: stamped_body(n)}))
            return await probe.wait()
        finally:  # the loop ends at its next turn; cancelling a blocked read leaks its connection
            probe.done.set()
            await reading

    async def redelivery(self, count: int, rate: int, delay: float) -> list[float]:
        """First deliveries stay pending; ``XAUTOCLAIM`` every 10 ms takes back what is idle
        for ``delay``."""
        key = await self._stream(group=True)
        probe = RedeliveryProbe(count, delay)

        async def consumer() -> None:  # first deliveries stay pending (not acknowledged)
            while not probe.done.is_set():
                for _, body in await self._read(key, block=100):
                    probe.first_delivery(body)

        async def claimer() -> None:  # pending longer than the delay: take it back, acknowledge
            while not probe.done.is_set():
                reply: Any = await self._redis.xautoclaim(
                    key, key, "c", min_idle_time=int(delay * 1000), start_id="0-0", count=256
                )
                claimed = [(i, f[_FIELD]) for i, f in reply[1] if f]
                for _, body in claimed:
                    probe.first_delivery(body)
                if claimed:
                    await self._redis.xack(key, key, *(entry_id for entry_id, _ in claimed))
                await asyncio.sleep(_CLAIM_EVERY)

        tasks = [asyncio.create_task(consumer()), asyncio.create_task(claimer())]
        try:
            await paced(rate, count, lambda n: self._redis.xadd(key, {_FIELD: stamped_body(n)}))
            return await probe.wait()
        finally:  # the loops end at their next turn (see latency)
            probe.done.set()
            await asyncio.gather(*tasks)
