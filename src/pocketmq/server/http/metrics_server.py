"""``/metrics`` and ``/healthz`` alone on an HTTP port: what a ``pocketmq proxy`` (a broker's gRPC
worker, or a stand-alone proxy) serves for Prometheus (docs/operations.md, "Proxies measured").

It keeps the rules of the broker's HTTP port that apply to an open, read-only page: the ``Host``
allow-list (421 for an unknown name: DNS rebinding), the connection cap and timeouts, and the
security headers (docs/security.md, "Dashboard and HTTP API").
"""

from __future__ import annotations

import ssl

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from pocketmq.server.http.dashboard.guard import add_security_headers
from pocketmq.server.http.limits import LimitedSite
from pocketmq.server.http.settings import HttpSettings

__all__ = ["MetricsServer"]


class MetricsServer:
    """Serves ``registry`` at ``/metrics`` (and ``/healthz``) within ``settings``' limits."""

    def __init__(self, registry: CollectorRegistry, settings: HttpSettings) -> None:
        self._registry = registry
        self._settings = settings
        app = web.Application(middlewares=[self._hosts])
        app.on_response_prepare.append(add_security_headers)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=settings.header_timeout
        )
        self.port = 0

    @web.middleware
    async def _hosts(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get(hdrs.HOST)
        if host is not None and not self._settings.hosts.allows(host):
            raise web.HTTPMisdirectedRequest(text="this proxy does not answer to that host name\n")
        return await handler(request)

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listen on ``host:port`` (0: any free port, then in :attr:`port`)."""
        await self._runner.setup()
        site = LimitedSite(self._runner, host, port, self._settings, ssl_context=tls)
        await site.start()
        self.port = site.port

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def close(self) -> None:
        """Stop listening."""
        await self._runner.cleanup()
