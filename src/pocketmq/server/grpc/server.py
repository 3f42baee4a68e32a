"""The gRPC listener: a ``grpc.aio`` server on the broker's event loop.

It shares the loop (and so the single core) with the native server: both call the same
:class:`~pocketmq.broker.Broker`. gRPC costs far more CPU per request than the native protocol
(docs/grpc.md; measured in docs/benchmarks.md, "gRPC compatibility"), which is why our own SDK
does not use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

import grpc

from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.credential import watch_users
from pocketmq.server.auth.users import UserStore
from pocketmq.server.grpc import AUTO_RENEW_INVISIBLE
from pocketmq.server.grpc.auth import AuthInterceptor
from pocketmq.server.grpc.handlers import messaging_handler
from pocketmq.server.grpc.permissive import PermissiveForwarder
from pocketmq.server.grpc.port import BrokerPort
from pocketmq.server.grpc.service import MessagingService
from pocketmq.server.rpcstats import RpcLatency

__all__ = ["GrpcServer"]

log = logging.getLogger("pocketmq.server.grpc")

_SESSION_SWEEP: Final = 30.0
_SESSION_IDLE: Final = 90.0  # three missed heartbeats
_STOP_GRACE: Final = 1.0


class GrpcServer:
    """The gRPC listener's lifecycle: the ``grpc.aio`` server, the one MessagingService it serves,
    and the sweep that forgets silent client sessions."""

    def __init__(
        self,
        broker: BrokerPort,
        grpc_address: Callable[[], str],
        *,
        auto_renew_invisible: float = AUTO_RENEW_INVISIBLE,
        users: UserStore | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self._broker = broker
        self._authorizer = authorizer  # the ACL on top of authentication
        self._users = users  # authentication on when given (docs/security.md)
        self.service = MessagingService(
            broker,
            grpc_address,
            auto_renew_invisible=auto_renew_invisible,
            real_peer=self.real_peer,
            users=users,
            authorizer=authorizer,
        )
        self.latency = RpcLatency()  # every call's answer time, for the metrics
        self._forwarder: PermissiveForwarder | None = None
        self._server: grpc.aio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._users_watch: asyncio.Task[None] | None = None  # ends streams of deleted users
        self.host = ""
        self.port = 0

    async def start(
        self,
        host: str,
        port: int,
        tls: tuple[bytes, bytes] | None = None,
        *,
        permissive: bool = False,
        reuse_port: bool = False,
    ) -> None:
        """Listen on ``host:port`` (0: any free port) with a request limit just above the largest
        message — over TLS with ``tls`` (PEM key and certificate chain), or TLS and plaintext on
        the one port with ``permissive`` (server/grpc/permissive.py); a port in use is an
        ``OSError``, never a shared port, unless ``reuse_port`` (the proxy workers of one broker
        share its gRPC port: docs/proxy.md)."""
        limit = self._broker.limits.max_message_size + 1024 * 1024  # room for headers
        interceptors = (
            [AuthInterceptor(self._users, self._authorizer, self.real_peer)]
            if self._users is not None
            else []
        )
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", limit),
                # a second broker on this port must fail, not share it; proxy workers share
                ("grpc.so_reuseport", 1 if reuse_port else 0),
            ],
        )
        server.add_generic_rpc_handlers((messaging_handler(self.service, self.latency),))
        if permissive:
            if tls is None:
                raise ValueError("permissive gRPC TLS needs a certificate")
            plain = _bind(server, "127.0.0.1", 0, None)
            secure = _bind(server, "127.0.0.1", 0, tls)
            await server.start()
            self._server = server
            self._forwarder = PermissiveForwarder(("127.0.0.1", plain), ("127.0.0.1", secure))
            try:
                await self._forwarder.start(host, port, reuse_port=reuse_port)
            except OSError as exc:
                raise OSError(f"cannot listen for gRPC on {host}:{port}: {exc}") from None
            bound = self._forwarder.port
        else:
            bound = _bind(server, host, port, tls)
            await server.start()
            self._server = server
        self.host, self.port = host, bound
        self._sweeper = asyncio.create_task(self._sweep_sessions(), name="grpc-sessions")
        if self._users is not None:
            self._users_watch = asyncio.create_task(
                watch_users(self._users, self.service.revoke_stale), name="grpc-users-watch"
            )
        mode = "TLS and plaintext" if permissive else "TLS" if tls else "plaintext"
        log.info("gRPC (apache.rocketmq.v2) listening on %s:%d (%s)", host, bound, mode)

    def real_peer(self, peer: str) -> str:
        """The client's address for a peer gRPC reports (the forwarder's, in permissive mode)."""
        return self._forwarder.real_peer(peer) if self._forwarder is not None else peer

    async def _sweep_sessions(self) -> None:
        while True:
            await asyncio.sleep(_SESSION_SWEEP)
            self.service.sessions.expire(_SESSION_IDLE)

    async def close(self) -> None:
        """Stop the session sweep and the server, giving running RPCs a short grace."""
        for task in (self._sweeper, self._users_watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._sweeper = self._users_watch = None
        if self._forwarder is not None:
            await self._forwarder.close()
        if self._server is not None:
            await self._server.stop(_STOP_GRACE)
            self._server = None


def _bind(server: Any, host: str, port: int, tls: tuple[bytes, bytes] | None) -> int:
    """Add a listening port to ``server``; its number, or an ``OSError`` saying why not."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is not None:
            bound = server.add_secure_port(target, grpc.ssl_server_credentials([tls]))
        else:
            bound = server.add_insecure_port(target)
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {target}: {exc}") from None
    if not bound:
        raise OSError(f"cannot listen for gRPC on {target}")
    return int(bound)
