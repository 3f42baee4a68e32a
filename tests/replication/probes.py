"""Small clients the failover tests watch brokers with: a prober that hammers one broker's native
port from the moment it accepts connections, a watcher of the name server's listing, and a
rogue "broker" that registers a made-up master (they speak the native protocol directly)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from pocketmq.client.connection import ClientConnection, connect
from pocketmq.errors import Code, PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

STORED = (Code.SUCCESS, Code.SLAVE_NOT_AVAILABLE, Code.FLUSH_SLAVE_TIMEOUT)


class Prober:
    """Sends to one broker and asks its status, over and over, reconnecting while its port is
    closed: what it acknowledged, the roles it claimed, and what refused the sends."""

    def __init__(self, address: str, topic: str = "T") -> None:
        self.address = address
        self.topic = topic
        self.acked: list[bytes] = []
        self.roles: list[str] = []
        self.refusals: list[str] = []
        self.connected = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task

    async def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            try:
                connection = await connect(self.address, "prober", timeout=1.0)
            except PocketMQError:
                await asyncio.sleep(0.005)
                continue
            self.connected += 1
            try:
                while not self._stop.is_set():
                    number += 1
                    await self._once(connection, f"probe{number}".encode())
                    await asyncio.sleep(0.005)
            except PocketMQError as exc:
                self.refusals.append(repr(exc))
            finally:
                connection.close()

    async def _once(self, connection: ClientConnection, body: bytes) -> None:
        status = await connection.request(
            RequestCode.BROKER_STATUS, w.Empty(), w.BrokerStatusResponse, 2.0
        )
        self.roles.append(str(status.replication.get("role")))
        request = w.SendRequest([w.InboundMessage(self.topic, body)])
        try:
            reply = await connection.request(RequestCode.SEND, request, w.SendResponse, 2.0)
        except PocketMQError as exc:
            self.refusals.append(repr(exc))
            return
        item = reply.results[0]
        if item.code in STORED:
            self.acked.append(body)
        else:
            self.refusals.append(f"{item.code}: {item.remark}")


@dataclass
class Listing:
    """The name server's listing of one group over time: (monotonic time, {id: role})."""

    samples: list[tuple[float, dict[int, str]]] = field(default_factory=list)

    def masters_at_once(self) -> int:
        """The most brokers listed as master in one answer."""
        return max(
            (sum(role == "master" for role in roles.values()) for _, roles in self.samples),
            default=0,
        )

    def listed_master_after(self, broker_id: int, moment: float) -> list[float]:
        """When ``broker_id`` was listed as master after ``moment``."""
        return [
            at for at, roles in self.samples if at > moment and roles.get(broker_id) == "master"
        ]


class ListingWatcher:
    """Asks a name server for its brokers every ``interval`` seconds."""

    def __init__(self, namesrv: str, group: str = "g1", interval: float = 0.05) -> None:
        self.namesrv = namesrv
        self.group = group
        self.interval = interval
        self.listing = Listing()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> Listing:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.listing

    async def _run(self) -> None:
        connection = await connect(self.namesrv, "listing", timeout=2.0)
        try:
            while True:
                reply = await connection.request(
                    RequestCode.LIST_BROKERS, w.Empty(), w.ListBrokersResponse, 2.0
                )
                roles = {b.broker_id: b.role for b in reply.brokers if b.name == self.group}
                self.listing.samples.append((time.monotonic(), roles))
                await asyncio.sleep(self.interval)
        finally:
            connection.close()


async def register_rogue_master(
    namesrv: str, *, group: str = "g1", epoch: int = 99, ha_address: str = "127.0.0.1:1"
) -> ClientConnection:
    """A "broker" that tells the name server it is ``group``'s master at ``epoch``, with a
    replication address nobody answers on. The connection is returned open: the name server
    forgets a registration whose connection closes."""
    connection = await connect(namesrv, "rogue", timeout=2.0)
    rogue = w.BrokerAddress(group, "127.0.0.1:9", "", 7, "master", epoch, ha_address)
    await connection.request(
        RequestCode.REGISTER_BROKER,
        w.RegisterBrokerRequest(rogue, [w.TopicSpec("T", 4, "normal", 6)]),
        w.RegisterBrokerResponse,
        2.0,
    )
    return connection


async def own_status(
    address: str, timeout: float = 3.0, credentials: tuple[str, str] = ("", "")
) -> dict[str, object]:
    """One broker's replication status, asked of that broker alone (``broker_status`` asks
    every broker its name server lists, frozen ones included); ``credentials``: a user's
    access and secret key, for a broker with authentication."""
    connection = await connect(address, "status", timeout=timeout, credentials=credentials)
    try:
        reply = await connection.request(
            RequestCode.BROKER_STATUS, w.Empty(), w.BrokerStatusResponse, timeout
        )
    finally:
        connection.close()
    return dict(reply.replication)


async def role_of(address: str, credentials: tuple[str, str] = ("", "")) -> str:
    """The role a broker says it has ("down" when it does not answer)."""
    try:
        return str((await own_status(address, 1.0, credentials))["role"])
    except PocketMQError:
        return "down"


async def wait_for_master(
    addresses: list[str], timeout: float = 30.0, credentials: tuple[str, str] = ("", "")
) -> str:
    """The one address among ``addresses`` that says it is master, once exactly one does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        roles = await asyncio.gather(*(role_of(a, credentials) for a in addresses))
        masters = [a for a, role in zip(addresses, roles, strict=True) if role == "master"]
        if len(masters) == 1:
            return masters[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no single master among {addresses} after {timeout} s")
