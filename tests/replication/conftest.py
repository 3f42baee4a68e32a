"""Replicated groups of real broker processes, and a link proxy that can cut or damage the stream.

A group is one stand-alone name server (so it outlives any broker), a master and its slaves,
each a ``pocketmq serve`` process with its own data directory. The slaves find their master's
replication port through ``--master``, or through a :class:`LinkProxy` in between when a test
needs to cut the link or flip a byte in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import Admin
from pocketmq.errors import BrokerConnectionError
from pocketmq.testing import BrokerProcess, EtcdProcess, NameServerProcess

FAST_GROUP: dict[str, Any] = {
    "broker": {
        "delay_levels": [round(0.5 * n, 1) for n in range(1, 19)],
        "state_persist_interval": 0.2,
        "max_queue_wait": 5.0,
        "ha_metadata_interval": 0.3,
        "transaction_check_interval": 0.5,
        "transaction_timeout": 0.5,
    },
    "store": {"flush_interval": 0.05, "checkpoint_interval": 0.2},
}


FAST_CONTROLLER: dict[str, Any] = {
    "controller_lease": 3,
    "controller_margin": 1.0,
    "controller_claim_delay": 0.5,
}
"""Controller timings for the short versions of the failover tests: a master frozen or killed is
replaced within about 3-5 s instead of 6-8 s (docs/replication.md §9)."""


def group_config(
    mode: str, server: dict[str, Any] | None = None, **broker: Any
) -> dict[str, dict[str, Any]]:
    config = {
        "broker": {**FAST_GROUP["broker"], "replication": mode, **broker},
        "store": dict(FAST_GROUP["store"]),
    }
    if server:
        config["server"] = dict(server)
    return config


class Group:
    """A name server, a master and slaves of one broker group (``g1``)."""

    def __init__(self, root: Path, namesrv: NameServerProcess, config: dict[str, Any],
                 *, grpc: bool = False, controller: str | None = None,
                 http: bool = False, extra_args: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.root = root
        self.namesrv = namesrv
        self.config = config
        self.grpc = grpc
        self.http = http
        self.controller = controller
        self.extra_args = extra_args  # every member's (e.g. --authentication --cluster-key K)
        self.master = BrokerProcess(
            root / "b0",
            namesrv=namesrv.address,
            broker_name="g1",
            config=config,
            grpc_port=0 if grpc else None,
            http_port=0 if http else None,
            extra_args=self._controller_args(),
        )
        self.slaves: list[BrokerProcess] = []

    def _controller_args(self, url: str | None = None) -> tuple[str, ...]:
        url = url or self.controller
        return (*self.extra_args, *(("--controller", url) if url else ()))

    def add_slave(self, master_ha: str | None = None, *, broker_id: int | None = None,
                  controller: str | None = None) -> BrokerProcess:  # fmt: skip
        broker_id = broker_id if broker_id is not None else len(self.slaves) + 1
        slave = BrokerProcess(
            self.root / f"b{broker_id}",
            namesrv=self.namesrv.address,
            broker_name="g1",
            config=self.config,
            grpc_port=0 if self.grpc else None,
            http_port=0 if self.http else None,
            extra_args=(
                *("--broker-id", str(broker_id), "--master", master_ha or self.master.ha),
                *self._controller_args(controller),
            ),
        )
        self.slaves.append(slave)
        return slave

    @property
    def members(self) -> list[BrokerProcess]:
        return [self.master, *self.slaves]

    def stop(self) -> None:
        """Stop every member, even when stopping one of them fails (no process left behind)."""
        errors = []
        for broker in self.members:
            try:
                broker.stop()
            except Exception as exc:  # reported once the others are stopped
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def make_group(tmp_path: Path) -> Iterator[Any]:
    """``make_group(mode="sync", slaves=1)`` starts a group; everything stops at the end."""
    made: list[Group] = []
    namesrv = NameServerProcess(tmp_path / "namesrv")

    def make(mode: str = "sync", slaves: int = 1, grpc: bool = False,
             controller: str | None = None, server: dict[str, Any] | None = None,
             http: bool = False, **broker: Any) -> Group:  # fmt: skip
        config = group_config(mode, server, **broker)
        root = tmp_path / f"group{len(made)}"
        group = Group(root, namesrv, config, grpc=grpc, controller=controller, http=http)
        made.append(group)
        for _ in range(slaves):
            group.add_slave()
        return group

    try:
        yield make
    finally:
        try:
            for group in made:
                group.stop()
        finally:
            namesrv.stop()  # even when a broker failed to stop: no process left behind


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A real single-member etcd (Debian's etcd-server) for automatic failover."""
    with EtcdProcess(tmp_path / "etcd") as process:
        yield process


async def status(address: str) -> dict[str, Any]:
    """One broker's replication status (``pocketmq broker status``'s ``replication``)."""
    async with Admin(servers=address) as admin:
        for item in await admin.broker_status():
            if item.address == address:
                if getattr(item, "error", ""):  # (absent before issue 29)
                    raise BrokerConnectionError(str(item.error), address=address)
                return dict(item.replication)
    raise AssertionError(f"{address} did not answer its status")


def commit_log(broker: BrokerProcess, end: int | None = None) -> bytes:
    """The bytes of a broker's commit log (its segments, in order), up to ``end``."""
    directory = broker.data_dir / "data" / "store" / "commitlog"
    data = b"".join(path.read_bytes() for path in sorted(directory.iterdir()))
    return data if end is None else data[:end]


class LinkProxy:
    """A TCP proxy for one replication link, run on its own thread: ``pause()`` stops
    forwarding (the link stays up but silent), ``cut()`` closes every connection, and
    ``corrupt_once(after)`` flips one byte of the master → slave stream ``after`` bytes in."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing: asyncio.Event | None = None
        self._corrupt_at: int | None = None
        self.downstream_bytes = 0
        self.corrupted = 0
        self.address = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> str:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = self.target.rpartition(":")
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer, downstream=False),
            self._pipe(up_reader, writer, downstream=True),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    *, downstream: bool) -> None:  # fmt: skip
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                assert self._flowing is not None
                await self._flowing.wait()
                if downstream:
                    data = self._maybe_corrupt(data)
                    self.downstream_bytes += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _maybe_corrupt(self, data: bytes) -> bytes:
        at = self._corrupt_at
        if at is None or not (self.downstream_bytes <= at < self.downstream_bytes + len(data)):
            return data
        self._corrupt_at = None
        self.corrupted += 1
        index = at - self.downstream_bytes
        return data[:index] + bytes([data[index] ^ 0xFF]) + data[index + 1 :]

    def corrupt_once(self, after: int) -> None:
        self._corrupt_at = self.downstream_bytes + after

    def pause(self) -> None:
        assert self._flowing is not None
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        assert self._flowing is not None
        self._loop.call_soon_threadsafe(self._flowing.set)

    def cut(self) -> None:
        async def close_all() -> None:
            for writer in list(self._writers):
                writer.close()

        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def link_proxy() -> Iterator[Any]:
    proxies: list[LinkProxy] = []

    def make(target: str) -> LinkProxy:
        proxy = LinkProxy(target)
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.close()
