"""TLS and plaintext gRPC on one port (``--grpc-tls permissive``, docs/security.md "TLS").

gRPC's server cannot accept both on one port, so in this mode the broker runs its gRPC server on
two loopback ports, one plain and one TLS, and this forwarder owns the public port: it looks at
each connection's first byte — a TLS handshake starts with 0x16, an HTTP/2 preface with ``P`` —
and splices the connection to the matching listener. The official clients then connect whether
TLS is on (Java, Go and C# by default) or off (Python by default).

The gRPC server sees the forwarder as every call's peer; :meth:`PermissiveForwarder.real_peer`
maps it back to the client's address (by the forwarder's own source port), so source-address
ACL rules and the dashboard's consumer list keep the real address.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

__all__ = ["PermissiveForwarder"]

log = logging.getLogger("pocketmq.server.grpc")

_TLS_HANDSHAKE = 0x16
_HIGH_WATER = 1 << 20


class _Upstream(asyncio.Protocol):
    """The forwarder's connection to one of the gRPC listeners."""

    def __init__(self, downstream: _Downstream) -> None:
        self._downstream = downstream
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, though not an asyncio.Transport subclass on uvloop: an
        # isinstance check there closed every gRPC connection
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self._downstream.send(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._downstream.close()

    def pause_writing(self) -> None:
        self._downstream.pause()

    def resume_writing(self) -> None:
        self._downstream.resume()


class _Downstream(asyncio.Protocol):
    """One client connection on the public port."""

    def __init__(self, forwarder: PermissiveForwarder) -> None:
        self._forwarder = forwarder
        self._transport: asyncio.Transport | None = None
        self._upstream: _Upstream | None = None
        self._pending: list[bytes] = []
        self._connecting = False
        self._closed = False
        self._peer = ""
        self._local_port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, transport)  # see _Upstream
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            host = str(peer[0])
            self._peer = f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"

    def data_received(self, data: bytes) -> None:
        upstream = self._upstream
        if upstream is not None and upstream.transport is not None:
            upstream.transport.write(data)
            return
        self._pending.append(data)
        if not self._connecting:
            self._connecting = True
            tls = data[0] == _TLS_HANDSHAKE
            asyncio.get_running_loop().create_task(self._connect(tls))

    async def _connect(self, tls: bool) -> None:
        host, port = self._forwarder.target(tls)
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(lambda: _Upstream(self), host, port)
        except OSError as exc:
            log.warning("gRPC forwarder cannot reach its listener %s:%d: %s", host, port, exc)
            self.close()
            return
        if self._closed:
            assert upstream.transport is not None
            upstream.transport.close()
            return
        self._upstream = upstream
        assert upstream.transport is not None
        local = upstream.transport.get_extra_info("sockname")
        self._local_port = int(local[1]) if isinstance(local, tuple) else 0
        self._forwarder.peers[self._local_port] = self._peer
        for chunk in self._pending:
            upstream.transport.write(chunk)
        self._pending = []

    def send(self, data: bytes) -> None:
        if self._transport is not None and not self._closed:
            self._transport.write(data)

    def pause(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        if self._upstream is not None and self._upstream.transport is not None:
            self._upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._upstream is not None and self._upstream.transport is not None:
            self._upstream.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._forwarder.peers.pop(self._local_port, None)
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None and self._upstream.transport is not None:
            self._upstream.transport.close()


class PermissiveForwarder:
    """The public gRPC port in permissive mode (module doc)."""

    def __init__(self, plain: tuple[str, int], tls: tuple[str, int]) -> None:
        self._plain = plain
        self._tls = tls
        self._server: asyncio.AbstractServer | None = None
        #: the forwarder's source port towards the gRPC server -> the client's address
        self.peers: dict[int, str] = {}
        self.port = 0

    def target(self, tls: bool) -> tuple[str, int]:
        """The listener a connection goes to."""
        return self._tls if tls else self._plain

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> None:
        """Listen on ``host:port`` (0: any free port, then in :attr:`port`); ``reuse_port``:
        share it with the other proxy workers of one broker."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Downstream(self), host, port, reuse_address=True, reuse_port=reuse_port or None
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    def real_peer(self, peer: str) -> str:
        """The client behind a peer the gRPC server saw (``ipv4:127.0.0.1:PORT``), or ``peer``
        itself when it did not come through the forwarder."""
        _, _, port = peer.rpartition(":")
        return self.peers.get(int(port), peer) if port.isdigit() else peer

    async def close(self) -> None:
        """Stop listening (open connections end with the gRPC server)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
