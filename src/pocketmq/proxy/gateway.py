"""One proxy process: the gRPC adapter on a port of its own, its broker over the native protocol.

RocketMQ 5 puts the gRPC endpoint in a proxy tier in front of the brokers because gRPC costs far
more CPU per request than the broker's own work. A ``pocketmq proxy`` does the same for one
broker: it terminates the official clients' gRPC with the very adapter the broker runs in-process
(server/grpc), and forwards each call as a native request (:mod:`pocketmq.proxy.remote`). It
keeps no state a client depends on — receipts, offsets, transactions and FIFO state all live in
the broker — so a proxy can be restarted, or several run side by side on one port
(``pocketmq serve --grpc-workers N``), without a client losing anything (docs/proxy.md).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pocketmq.errors import BrokerConnectionError
from pocketmq.proxy.remote import RemotePort
from pocketmq.proxy.security import GatewaySecurity
from pocketmq.server.grpc.server import GrpcServer

if TYPE_CHECKING:
    from pocketmq.server.http.metrics_server import MetricsServer

__all__ = ["Gateway", "GatewaySecurity", "MetricsPort"]

log = logging.getLogger("pocketmq.proxy")

CONNECT_PATIENCE: Final = 30.0
"""How long a starting proxy keeps trying to reach its broker before it gives up."""


@dataclass(frozen=True, slots=True)
class MetricsPort:
    """Where the proxy serves ``/metrics`` (docs/operations.md, "Proxies measured"): ``port`` on
    the proxy's host (0: any free one), the extra names it answers to, HTTPS with ``tls``, and
    the worker number it reports ("" for a stand-alone proxy)."""

    port: int
    hosts: tuple[str, ...] = ()
    tls: ssl.SSLContext | None = None
    worker: str = ""


class Gateway:
    """A proxy's lifecycle: reach the broker, then serve gRPC on ``host:port`` (``reuse_port``:
    share the port with the other workers of one broker). ``advertise`` is the address clients
    are told to use (the shared port's), defaulting to the one bound."""

    def __init__(
        self,
        broker_address: str,
        host: str,
        port: int,
        *,
        advertise: str = "",
        reuse_port: bool = False,
        security: GatewaySecurity | None = None,
        ping_interval: float = 0.0,
        metrics: MetricsPort | None = None,
    ) -> None:
        self._ping_interval = ping_interval
        self._metrics = metrics
        self._metrics_server: MetricsServer | None = None
        self.metrics_address = ""
        self._pinger: asyncio.Task[None] | None = None
        self._security = security = security or GatewaySecurity()
        self.port = RemotePort(
            broker_address, tls=security.link_tls, credentials=security.credentials
        )
        self._host = host
        self._wanted_port = port
        self._advertise = advertise
        self._reuse_port = reuse_port
        self._server: GrpcServer | None = None
        self.grpc_address = ""

    async def start(self) -> None:
        """Connect to the broker (retrying for :data:`CONNECT_PATIENCE`) and listen."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONNECT_PATIENCE
        while True:
            try:
                await self.port.start()
                break
            except BrokerConnectionError as exc:
                if loop.time() > deadline:
                    raise
                log.warning("broker %s not reachable yet: %s", self.port.address, exc)
                await asyncio.sleep(0.5)
        security = self._security
        server = GrpcServer(
            self.port,
            lambda: self.grpc_address,
            auto_renew_invisible=self.port.auto_renew_invisible,
            users=security.users,
            authorizer=security.authorizer,
        )
        await server.start(
            self._host,
            self._wanted_port,
            security.tls_pem,
            permissive=security.permissive,
            reuse_port=self._reuse_port,
        )
        self._server = server
        self.grpc_address = self._advertise or f"{self._host}:{server.port}"
        self.port.advertised = self.grpc_address
        if self._metrics is not None:
            await self._serve_metrics(self._metrics)
        if self._ping_interval > 0:
            self._pinger = asyncio.create_task(self._ping(), name="proxy-ping")

    async def _serve_metrics(self, metrics: MetricsPort) -> None:
        """``/metrics`` on its own HTTP port (aiohttp only then)."""
        from pocketmq.proxy.metrics import ProxyCollector, proxy_registry
        from pocketmq.server.http.hosts import HostPolicy
        from pocketmq.server.http.metrics_server import MetricsServer
        from pocketmq.server.http.settings import HttpSettings

        advertised = self.grpc_address.rpartition(":")[0]
        collector = ProxyCollector(
            lambda: (self.port.name, metrics.worker),
            lambda: self._server.latency if self._server is not None else None,
            self.port.batch_sizes,
            lambda: self._server.service.sessions.kinds() if self._server else ({}, {}),
        )
        settings = HttpSettings(hosts=HostPolicy.build(self._host, metrics.hosts, advertised))
        server = MetricsServer(proxy_registry(collector), settings)
        await server.start(self._host, metrics.port, metrics.tls)
        self._metrics_server = server
        bound = self._host if self._host not in ("0.0.0.0", "::", "") else advertised
        self.metrics_address = f"{bound}:{server.port}"

    async def _ping(self) -> None:
        """Ask the broker for its settings every ``ping_interval``: picks up changed limits,
        and tells a broker whose worker this is that its loop still runs."""
        while True:
            await asyncio.sleep(self._ping_interval)
            try:
                await self.port.start()
            except Exception as exc:  # the broker away: the next ping tries again
                log.debug("ping of broker %s failed: %s", self.port.address, exc)

    def ready_line(self) -> str:
        """The line scripts (and ``pocketmq serve --grpc-workers``) wait for."""
        return (
            f"pocketmq proxy ready grpc={self.grpc_address} "
            f"broker={self.port.name}@{self.port.address} "
            f"http={self.metrics_address or 'disabled'}"
        )

    async def close(self) -> None:
        """Stop serving, then close the broker connection."""
        if self._pinger is not None:
            self._pinger.cancel()
        if self._metrics_server is not None:
            await self._metrics_server.close()
            self._metrics_server = None
        if self._server is not None:
            await self._server.close()
            self._server = None
        await self.port.close()
