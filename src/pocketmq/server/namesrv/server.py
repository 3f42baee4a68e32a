"""The name server: which broker serves which queues of a topic.

Brokers register their address and topics every 30 s; a broker silent for 120 s is dropped
(RocketMQ's defaults). Clients — or brokers asking on a client's behalf — fetch a topic's route:
the brokers that hold it and the queues each one serves. The name server keeps no disk state: a
restarted name server is complete again after one registration round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from pocketmq.errors import TopicNotFoundError
from pocketmq.protocol import MAX_FRAME_BODY, PROTOCOL_VERSION, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.native.tcp import FrameServer
from pocketmq.version import VERSION

__all__ = ["BROKER_EXPIRY", "NameServer", "RouteTable"]

BROKER_EXPIRY = 120.0


@dataclass(slots=True)
class _Registration:
    broker: w.BrokerAddress
    topics: dict[str, w.TopicSpec]
    last_seen: float


class RouteTable:
    """The live brokers and their topics, as registrations report them; routes are computed from it
    on every lookup."""

    def __init__(self, expiry: float = BROKER_EXPIRY, clock: Callable[[], float] = time.monotonic):
        self._expiry = expiry
        self._clock = clock
        self._brokers: dict[str, _Registration] = {}

    def register(self, broker: w.BrokerAddress, topics: list[w.TopicSpec]) -> None:
        """Record a broker's address and topics, replacing its previous registration (a deleted
        topic disappears with the next one)."""
        self._brokers[broker.name] = _Registration(
            broker, {t.name: t for t in topics}, self._clock()
        )

    def expire(self) -> list[str]:
        """Drop brokers silent for longer than the expiry; returns their names, for the log."""
        now = self._clock()
        gone = [n for n, r in self._brokers.items() if now - r.last_seen > self._expiry]
        for name in gone:
            del self._brokers[name]
        return gone

    def route(self, topic: str) -> w.RouteResponse:
        """Every live broker holding ``topic`` and its queues; a topic no broker holds is
        :class:`TopicNotFoundError`."""
        self.expire()
        brokers: list[w.BrokerAddress] = []
        queues: list[w.QueueRoute] = []
        topic_type = "normal"
        for name in sorted(self._brokers):
            registration = self._brokers[name]
            spec = registration.topics.get(topic)
            if spec is None:
                continue
            topic_type = spec.topic_type
            brokers.append(registration.broker)
            queues.extend(w.QueueRoute(name, q, spec.perm) for q in range(spec.queues))
        if not brokers:
            raise TopicNotFoundError(
                f"topic {topic!r} does not exist on any broker; create it with "
                f"`pocketmq topic create {topic}`"
            )
        return w.RouteResponse(topic, topic_type, brokers, queues)

    def brokers(self) -> list[w.BrokerAddress]:
        """Every live broker, sorted by name."""
        self.expire()
        return [self._brokers[n].broker for n in sorted(self._brokers)]


class NameServer:
    """The route registry's server (module doc): the native protocol's HELLO, REGISTER_BROKER,
    GET_ROUTE and LIST_BROKERS, nothing else."""

    def __init__(
        self, expiry: float = BROKER_EXPIRY, *, limits: ConnectionLimits | None = None
    ) -> None:
        self.routes = RouteTable(expiry)
        self._server = FrameServer(self._handlers(), limits=limits)
        self._sweeper: asyncio.Task[None] | None = None

    def _handlers(self) -> HandlerTable:
        def hello(conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
            conn.greeted = True
            conn.client_id = req.client_id
            return w.HelloResponse(
                PROTOCOL_VERSION,
                VERSION,
                "namesrv",
                "namesrv",
                MAX_FRAME_BODY,
                0,
                int(conn.limits.idle_timeout * 1000),
            )

        def register(conn: ServerConnection, req: w.RegisterBrokerRequest) -> w.Empty:
            self.routes.register(req.broker, req.topics)
            return w.Empty()

        def get_route(conn: ServerConnection, req: w.GetRouteRequest) -> w.RouteResponse:
            return self.routes.route(req.topic)

        def list_brokers(conn: ServerConnection, req: w.Empty) -> w.ListBrokersResponse:
            return w.ListBrokersResponse(self.routes.brokers())

        return {
            RequestCode.HELLO: hello,
            RequestCode.REGISTER_BROKER: register,
            RequestCode.GET_ROUTE: get_route,
            RequestCode.LIST_BROKERS: list_brokers,
        }

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` and start dropping silent brokers."""
        await self._server.start(host, port)
        self._sweeper = asyncio.create_task(self._sweep())

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(10)
            self.routes.expire()

    @property
    def address(self) -> str:
        """``host:port`` as it listens (the real port when it was 0)."""
        return self._server.address

    async def close(self) -> None:
        """Stop the expiry sweep and the listener."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._server.close()
