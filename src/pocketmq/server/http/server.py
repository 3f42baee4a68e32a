"""The HTTP listener (``--http-port``, 5557 by default like RocketMQ's exporter; bound to the
broker's host): ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for orchestrators, and
the operator dashboard with its JSON API (docs/operations.md). aiohttp, Jinja2 and
prometheus-client are imported only when it is enabled.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from pocketmq.broker import Broker
from pocketmq.broker.ha.replication import Role
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.users import UserStore
from pocketmq.server.http.cluster import ClusterView
from pocketmq.server.http.dashboard.cluster import ClusterPages
from pocketmq.server.http.dashboard.guard import (
    Guard,
    add_security_headers,
    is_loopback,
    load_token,
)
from pocketmq.server.http.dashboard.trends import Trends
from pocketmq.server.http.dashboard.views import Dashboard
from pocketmq.server.http.history import History
from pocketmq.server.http.limits import LimitedSite
from pocketmq.server.http.metrics import BrokerCollector, Connections
from pocketmq.server.http.sampler import HistoryCollector, Sampler
from pocketmq.server.http.settings import HttpSettings
from pocketmq.server.rpcstats import RpcLatency

__all__ = ["HttpServer"]

_LINGERING_TIME = 2.0


class HttpServer:
    """Serves the metrics and health endpoints, and the dashboard, of one broker, within the
    limits of its :class:`HttpSettings` (docs/security.md, "Dashboard and HTTP API")."""

    def __init__(
        self,
        broker: Broker,
        connections: Callable[[], Connections],
        latencies: Callable[[], list[RpcLatency]] = list,
        *,
        users: UserStore | None = None,
        authorizer: Authorizer | None = None,
        settings: HttpSettings | None = None,
        cluster: ClusterView | None = None,
    ) -> None:
        self._broker = broker
        self.scrape_seconds = 0.0
        self.registry = CollectorRegistry()
        self.registry.register(
            BrokerCollector(broker, connections, lambda: self.scrape_seconds, latencies)
        )
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        config_dir = os.path.join(broker.config.data_dir, "config")
        self.settings = settings or HttpSettings()
        self._users = users
        self.guard = Guard(load_token(config_dir), False, users, settings=self.settings)
        app = web.Application(middlewares=[self.guard.middleware], client_max_size=1 << 20)
        app.on_response_prepare.append(add_security_headers)
        self.dashboard = Dashboard(broker, self.guard, authorizer)
        self.dashboard.add_routes(app)
        self.sampler: Sampler | None = None  # the charts' history (docs/operations.md, "Charts")
        if self.settings.history_interval > 0:
            history = History(
                self.settings.history_interval, max_series=self.settings.history_max_series
            )
            self.sampler = Sampler(broker, history)
            self.registry.register(HistoryCollector(self.sampler))
        Trends(self.dashboard, self.sampler.history if self.sampler else None).add_routes(app)
        self.cluster = cluster
        if cluster is not None:
            ClusterPages(self.dashboard, cluster).add_routes(app)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        # aiohttp's keep-alive timer is the header deadline: it closes a connection whose next
        # request's headers have not all arrived this long after its start or the last answer;
        # after an answer to a request whose body is not all read (a 408, a refusal), it reads
        # on for at most the lingering time, so the client can see the answer, then closes
        self._runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=self.settings.header_timeout,
            lingering_time=min(_LINGERING_TIME, self.settings.body_timeout),
        )
        self.site: LimitedSite | None = None
        self.port = 0

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listen on ``host:port`` (0: any free port, then in :attr:`port`), HTTPS with ``tls``."""
        # reading the dashboard needs a sign-in unless only this machine can connect and the
        # other ports ask nobody for credentials either (docs/security.md)
        self.guard.open_reads = is_loopback(host) and self._users is None
        await self._runner.setup()
        self.site = LimitedSite(self._runner, host, port, self.settings, ssl_context=tls)
        await self.site.start()
        self.port = self.site.port
        if self.sampler is not None:
            self.sampler.start()

    async def _metrics(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = generate_latest(self.registry)
        # the page is built on the event loop: this is how long the scrape held it (the next
        # scrape reports it as pocketmq_scrape_seconds)
        self.scrape_seconds = time.perf_counter() - started
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        """The process serves (the event loop answers)."""
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        """Ready to take writes: a master whose store and controller allow them; a slave when
        it is linked to its master. 503 with the reason otherwise (a failed store, a full disk:
        docs/operations.md, "A full disk")."""
        broker = self._broker
        replication = broker.ha.replication
        stats = broker.store_statistics()
        if stats.failure:
            return web.Response(status=503, text=f"store failed: {stats.failure}\n")
        if stats.refusing_writes:
            return web.Response(status=503, text=f"refusing writes: {stats.refusing_writes}\n")
        if broker.role is Role.MASTER:
            refusal = replication.write_refusal()
            if refusal:
                return web.Response(status=503, text=refusal + "\n")
            return web.Response(text="ready: master\n")
        if not replication.master_address:
            return web.Response(status=503, text="slave without a link to its master\n")
        return web.Response(text="ready: slave\n")

    async def close(self) -> None:
        """Stop sampling and listening."""
        if self.sampler is not None:
            await self.sampler.close()
        if self.cluster is not None:
            await self.cluster.close()
        await self._runner.cleanup()
