"""The name server: which broker serves which queues of a topic (the table: routes.py).

Brokers register their address and topics every 30 s; a broker silent for 120 s is dropped
(RocketMQ's defaults), and so is one whose connection closes. Clients — or brokers asking on a
client's behalf — fetch a topic's route: the brokers that hold it and the queues each one serves.
The name server keeps no disk state: a restarted name server is complete again after one
registration round.

With authentication (docs/security.md, "Trust inside the cluster") every connection completes the
native handshake first; only members of the cluster (the cluster key) may register a broker, users
and members may read routes and the broker list.

The same port answers RocketMQ's remoting clients (docs/remoting.md, "Name server"): each
connection is served by the protocol its first bytes name, the remoting requests by
``server/namesrv/remoting.py`` from the same table. With authentication every remoting request
must carry a user's 4.x ACL signature; no broker registers over remoting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

from pocketmq.protocol import MAX_FRAME_BODY, PROTOCOL_VERSION, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.namesrv.remoting import namesrv_remoting_handlers
from pocketmq.server.namesrv.routes import BROKER_EXPIRY, MAX_REGISTERED_BROKERS, RouteTable
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.handshake import authenticate_handler, greet, namesrv_permissions
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.native.tcp import FrameServer
from pocketmq.server.remoting import RemotingPort, SignatureCheck
from pocketmq.version import VERSION

__all__ = ["BROKER_EXPIRY", "NameServer", "RouteTable"]

log = logging.getLogger("pocketmq.namesrv")


class NameServer:
    """The route registry's server (module doc): the native protocol's HELLO, AUTHENTICATE,
    REGISTER_BROKER, GET_ROUTE and LIST_BROKERS, and the remoting protocol's route, cluster and
    topic-list reads, nothing else. ``authenticator``: every connection must authenticate, every
    remoting request be signed by one of its users (module doc)."""

    def __init__(
        self,
        expiry: float = BROKER_EXPIRY,
        *,
        limits: ConnectionLimits | None = None,
        tls: ssl.SSLContext | None = None,
        authenticator: Authenticator | None = None,
        max_brokers: int = MAX_REGISTERED_BROKERS,
    ) -> None:
        self.routes = RouteTable(expiry, max_brokers=max_brokers)
        self.authenticator = authenticator
        self.remoting = RemotingPort(
            namesrv_remoting_handlers(self.routes), signatures=SignatureCheck.of(authenticator)
        )
        self._server = FrameServer(
            self._handlers(), on_close=self._closed, limits=limits, tls=tls, remoting=self.remoting
        )
        self._sweeper: asyncio.Task[None] | None = None

    def _handlers(self) -> HandlerTable:
        def hello(conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
            return w.HelloResponse(
                PROTOCOL_VERSION,
                VERSION,
                "namesrv",
                "namesrv",
                MAX_FRAME_BODY,
                0,
                int(conn.limits.idle_timeout * 1000),
                greet(conn, req, self.authenticator),
            )

        def register(
            conn: ServerConnection, req: w.RegisterBrokerRequest
        ) -> w.RegisterBrokerResponse:
            return self.routes.register(req.broker, req.topics, conn, req.lease_ms)

        def get_route(conn: ServerConnection, req: w.GetRouteRequest) -> w.RouteResponse:
            return self.routes.route(req.topic)

        def list_brokers(conn: ServerConnection, req: w.Empty) -> w.ListBrokersResponse:
            return w.ListBrokersResponse(self.routes.brokers())

        return {
            RequestCode.HELLO: hello,
            RequestCode.AUTHENTICATE: authenticate_handler(
                self.authenticator, lambda: "namesrv", namesrv_permissions
            ),
            RequestCode.REGISTER_BROKER: register,
            RequestCode.GET_ROUTE: get_route,
            RequestCode.LIST_BROKERS: list_brokers,
        }

    def _closed(self, conn: ServerConnection) -> None:
        for name, broker_id in self.routes.disconnected(conn):
            log.info("broker %s/%d disconnected: out of the routes", name, broker_id)

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

    @property
    def port(self) -> int:
        """The port it listens on (the real one when it was 0)."""
        return self._server.port

    async def close(self) -> None:
        """Stop the expiry sweep and the listener."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._server.close()
