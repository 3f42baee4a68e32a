"""What one HTTP client may hold (docs/security.md, "Dashboard and HTTP API"): a cap on open
connections, overall and per source address, and a deadline for a client that stops taking the
bytes of an answer.

aiohttp bounds the rest: its keep-alive timer (set to ``header_timeout``) closes a connection
whose next request's headers have not arrived in time — a slow-loris client sending a header
byte now and then included — and the guard (dashboard/guard.py) reads a request's body within
``body_timeout``. What aiohttp lacks is a connection cap and a deadline on a stalled write, so
:class:`LimitedSite` puts a small protocol in front of aiohttp's own for each connection.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import ssl
from typing import cast

from aiohttp import web

from pocketmq.server.http.settings import HttpSettings
from pocketmq.server.ratelog import RateLimitedLog

__all__ = ["ConnectionCap", "LimitedSite", "address_key"]

log = RateLimitedLog(logging.getLogger("pocketmq.server.http"))
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 36\r\nRetry-After: 1\r\n\r\ntoo many connections: try again soon"
)


def address_key(peer: object) -> str:
    """What a client's connections and sign-ins are counted under: its IPv4 address, or the
    /64 of its IPv6 address (one host usually has a whole /64)."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer or "")
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class ConnectionCap:
    """Counts open connections, overall and per source address."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self.open = 0
        self._by_address: collections.Counter[str] = collections.Counter()

    def admit(self, key: str) -> bool:
        """Count one more connection from ``key`` unless a limit is reached."""
        if self.open >= self.total or self._by_address[key] >= self.per_address:
            return False
        self.open += 1
        self._by_address[key] += 1
        return True

    def release(self, key: str) -> None:
        """A connection counted by :meth:`admit` closed."""
        self.open -= 1
        self._by_address[key] -= 1
        if not self._by_address[key]:
            del self._by_address[key]


class _Limited(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the cap and the write deadline."""

    def __init__(self, inner: asyncio.Protocol, cap: ConnectionCap, write_timeout: float) -> None:
        self._inner = inner
        self._cap = cap
        self._write_timeout = write_timeout
        self._key: str | None = None  # None: refused (or not yet made)
        self._stalled: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, though not an asyncio.Transport subclass on uvloop: an
        # isinstance check there closed every HTTP connection
        transport = cast(asyncio.Transport, transport)
        key = address_key(transport.get_extra_info("peername"))
        if not self._cap.admit(key):
            log.warning("cap", "refused an HTTP connection from %s: too many connections", key)
            transport.write(_BUSY)
            transport.close()
            return
        self._key, self._transport = key, transport
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._key is None:
            return
        self._cap.release(self._key)
        self._key = None
        if self._stalled is not None:
            self._stalled.cancel()
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._key is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._key is not None else None

    def pause_writing(self) -> None:
        # the client stopped taking our bytes: it has write_timeout to start again
        if self._stalled is None and self._transport is not None:
            loop = asyncio.get_running_loop()
            self._stalled = loop.call_later(self._write_timeout, self._transport.abort)
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self._inner.resume_writing()


class LimitedSite(web.BaseSite):
    """aiohttp's TCP site with every connection behind a :class:`ConnectionCap` and the write
    deadline (module doc)."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        settings: HttpSettings,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port = host, port
        self._settings = settings
        self.cap = ConnectionCap(settings.max_connections, settings.max_per_address)
        self.port = 0

    @property
    def name(self) -> str:
        """The site's URL, as aiohttp names its sites in logs."""
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.port or self._port}"

    async def start(self) -> None:
        """Listen (the bound port is then in :attr:`port`)."""
        await super().start()
        server = self._runner.server
        assert server is not None
        settings = self._settings
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Limited(server(), self.cap, settings.body_timeout),
            self._host,
            self._port,
            ssl=self._ssl_context,
            reuse_address=True,
            # a TLS client must finish its handshake in time too (connections in their handshake
            # are not counted yet: this bounds how long each holds a socket)
            ssl_handshake_timeout=settings.header_timeout if self._ssl_context else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
