"""Topic routes (which broker holds which queues), fetched from any server and refreshed.

A route is asked of the configured servers in turn (brokers answer with the cluster view they get
from their name server). Routes are cached and refreshed every 30 s in the background, and
dropped at once when a send or pull finds them wrong. Each group is reached at the first broker
the route lists for it: its master, or a slave (read-only queues) while the group has no master
(docs/replication.md §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from pocketmq.client.config import ClientConfig
from pocketmq.client.pool import ConnectionPool
from pocketmq.errors import BrokerConnectionError, TopicNotFoundError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["QueueRef", "Route", "RouteCache"]

PERM_READ = 4
PERM_WRITE = 2


@dataclass(frozen=True, slots=True)
class QueueRef:
    """One queue of a topic on one broker, with the broker's address and the queue's permissions."""

    broker_name: str
    address: str
    queue_id: int
    perm: int

    @property
    def key(self) -> tuple[str, int]:
        """``(broker name, queue id)``: the order every consumer sorts queues in."""
        return (self.broker_name, self.queue_id)


@dataclass(frozen=True, slots=True)
class Route:
    """A topic's queues and brokers at one moment; ``writable``/``readable`` are precomputed
    because every send and rebalance asks.
    """

    topic: str
    topic_type: str
    queues: tuple[QueueRef, ...]
    addresses: dict[str, str]
    fetched_at: float
    masterless: frozenset[str] = frozenset()
    """Groups the route lists with no master (their queues read-only): failing over."""
    writable: tuple[QueueRef, ...] = field(init=False)
    readable: tuple[QueueRef, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "writable", tuple(q for q in self.queues if q.perm & PERM_WRITE))
        object.__setattr__(self, "readable", tuple(q for q in self.queues if q.perm & PERM_READ))


class RouteCache:
    """Routes by topic, fetched on first use and refreshed in the background."""

    def __init__(self, pool: ConnectionPool, config: ClientConfig) -> None:
        self._pool = pool
        self._config = config
        self._routes: dict[str, Route] = {}
        self._fetching: dict[str, asyncio.Future[Route]] = {}
        self._refresher: asyncio.Task[None] | None = None

    def cached(self, topic: str) -> Route | None:
        """The cached route, without I/O: the send hot path tries this first."""
        return self._routes.get(topic)

    async def get(self, topic: str, *, refresh: bool = False) -> Route:
        """The route of ``topic``, fetched if not cached (or if ``refresh``)."""
        route = self._routes.get(topic)
        if route is None or refresh:
            route = await self._fetch(topic)
            self._routes[topic] = route
        return route

    async def fresh(self, topic: str, max_age: float) -> Route:
        """The route of ``topic`` fetched at most ``max_age`` seconds ago: many sends watching
        one topic's route (a failover) share one fetch at a time."""
        route = self._routes.get(topic)
        if route is not None and time.monotonic() - route.fetched_at <= max_age:
            return route
        fetching = self._fetching.get(topic)
        if fetching is None:
            fetching = asyncio.ensure_future(self._fetch(topic))
            self._fetching[topic] = fetching
            fetching.add_done_callback(lambda done: self._fetched(topic, done))
        route = await asyncio.shield(fetching)
        self._routes[topic] = route
        return route

    def _fetched(self, topic: str, done: asyncio.Future[Route]) -> None:
        self._fetching.pop(topic, None)
        if not done.cancelled():
            done.exception()  # retrieved: a waiter that gave up must not leave it unread

    def invalidate(self, topic: str) -> None:
        """Forget ``topic``'s route: a send or a change found it stale."""
        self._routes.pop(topic, None)

    async def _fetch(self, topic: str) -> Route:
        last: Exception | None = None
        for server in self._config.servers:
            try:
                connection = await self._pool.get(server)
                reply = await connection.request(
                    RequestCode.GET_ROUTE,
                    w.GetRouteRequest(topic),
                    w.RouteResponse,
                    self._config.request_timeout,
                )
            except BrokerConnectionError as exc:
                last = exc
                continue
            addresses: dict[str, str] = {}
            masters: set[str] = set()
            for broker in reply.brokers:  # a group's master first, then its slaves
                addresses.setdefault(broker.name, broker.address)
                if broker.role == "master":
                    masters.add(broker.name)
            queues = tuple(
                QueueRef(q.broker_name, addresses[q.broker_name], q.queue_id, q.perm)
                for q in sorted(reply.queues, key=lambda q: (q.broker_name, q.queue_id))
                if q.broker_name in addresses
            )
            masterless = frozenset(addresses) - masters
            return Route(topic, reply.topic_type, queues, addresses, time.monotonic(), masterless)
        if last is not None:
            raise last
        raise TopicNotFoundError(f"no server configured to ask for topic {topic!r}")

    def start(self) -> None:
        """Refresh every cached route every ``route_refresh_interval`` (30 s)."""
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_forever())

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.route_refresh_interval)
            for topic in list(self._routes):
                with contextlib.suppress(Exception):
                    self._routes[topic] = await self._fetch(topic)

    async def close(self) -> None:
        """Stop refreshing."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
