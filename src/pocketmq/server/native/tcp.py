"""A TCP listener that hands each connection a :class:`ServerConnection` with a handler table.

Shared by the broker's native server and the name server: they differ only in their handlers.
Given a second protocol (``remoting=``: RocketMQ's remoting protocol, docs/remoting.md), each new
connection is first held by a :class:`~pocketmq.server.listening.ProtocolSniffer` and served by
the protocol its first bytes name; without one, connections are native from their first byte.

It accepts connections itself rather than through ``loop.create_server`` so that a client it
cannot serve gets an answer instead of a timeout (docs/protocol.md "Limits"):

- past ``max_connections``, the new connection receives a ``TOO_MANY_REQUESTS`` response
  (request id 0) and is closed — unless a connection is still in its handshake: then the one
  that has waited longest is closed instead, and so when more than ``max_pending_connections``
  are in their handshake (the new client always gets its chance: idle unauthenticated
  connections cannot lock users out, as OpenSSH's ``MaxStartups``);
- when the process is out of file descriptors (``accept`` fails with EMFILE/ENFILE), a spare
  descriptor kept for this moment is released to accept one waiting client, tell it
  ``SERVICE_NOT_AVAILABLE`` and close it; accepting backs off while no descriptor is free, and
  the condition is logged once per interval, not once per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Final, cast

from pocketmq.errors import Code, TooManyRequestsError
from pocketmq.protocol import FrameKind, encode_body, encode_frame
from pocketmq.protocol.remoting.sniff import WireProtocol
from pocketmq.protocol.structs import ErrorBody
from pocketmq.server.listening import PortShare, ProtocolSniffer, SecondProtocol, Served
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.limits import BufferBudget, ConnectionLimits
from pocketmq.server.ratelog import RateLimitedLog
from pocketmq.server.rpcstats import RpcLatency

__all__ = ["FrameServer"]

log = logging.getLogger("pocketmq.server")

_OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE})
_OUT_OF_MEMORY: Final = frozenset({errno.ENOBUFS, errno.ENOMEM})
_ACCEPTS_PER_WAKEUP: Final = 64
_ACCEPT_BACKOFF_MIN: Final = 0.05
_ACCEPT_BACKOFF_MAX: Final = 1.0  # asyncio's own ACCEPT_RETRY_DELAY
_SWEEP_INTERVAL_MAX: Final = 1.0


def _refusal(code: int, remark: str) -> bytes:
    return encode_frame(FrameKind.RESPONSE, code, 0, encode_body(ErrorBody(remark)))


def _refuse(sock: socket.socket, frame: bytes) -> None:
    """Tell a just-accepted client why it cannot stay, then close it (never blocks)."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(frame)
    sock.close()


def _spare_descriptor() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


class FrameServer:
    """The TCP listener (module doc): accepts connections itself so it can answer the ones it cannot
    serve, and keeps the limits and the buffer budget all its connections share."""

    def __init__(
        self,
        handlers: HandlerTable,
        *,
        on_close: Callable[[ServerConnection], None] | None = None,
        limits: ConnectionLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        tls: ssl.SSLContext | None = None,
        remoting: SecondProtocol | None = None,
    ) -> None:
        self._handlers = handlers
        self._remoting = remoting  # sniff each connection's protocol (module doc)
        self._tls = tls  # TLS on this port (docs/security.md)
        self._on_close_hook = on_close
        self.limits = limits or ConnectionLimits()
        self.budget = BufferBudget(self.limits.max_buffered_bytes)
        self._clock = clock
        self.log = RateLimitedLog(log)  # bad input and resource trouble, one line per interval
        self._listeners: list[socket.socket] = []
        self._accepting = 0  # accepted sockets whose transport is being set up
        self._spare: int | None = None
        self._backoff = 0.0
        self._resume: asyncio.TimerHandle | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[ServerConnection] = set()  # the native ones
        # connections of the second protocol, and those whose protocol is not known yet
        self.others: set[Served] = set()
        # connections still in their handshake, oldest first (dicts keep insertion order), with
        # the task setting each up (its TLS handshake may still be going on)
        self.pending: dict[Served, asyncio.Task[Any] | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.refused = 0  # connections answered with an error and closed at accept
        self.latency = RpcLatency()  # every connection's answers, for the metrics
        self.host = ""
        self.port = 0
        self._share = PortShare(
            self.limits,
            self.budget,
            clock,
            self.log,
            self.latency,
            self._tasks,
            self._established,
            self._closed,
        )

    @property
    def open_count(self) -> int:
        """Connections held, of either protocol or not known yet."""
        return len(self.connections) + len(self.others)

    async def start(self, host: str, port: int) -> None:
        """Listen on every address ``host`` resolves to (0: any free port)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        seen: set[tuple[int, object]] = set()
        try:
            for family, kind, proto, _, address in infos:
                if (family, address) in seen:
                    continue
                seen.add((family, address))
                if self._listeners:  # port 0: every address listens on the first one's port
                    address = (address[0], self.port, *address[2:])
                sock = socket.socket(family, kind, proto)
                self._listeners.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(address)
                except OSError as exc:
                    raise OSError(
                        exc.errno, f"cannot listen on {address}: {exc.strerror}"
                    ) from None
                sock.listen(1024)
                sock.setblocking(False)
                if not self.port:
                    self.host, self.port = sock.getsockname()[:2]
        except BaseException:
            for sock in self._listeners:
                sock.close()
            self._listeners = []
            raise
        self._spare = _spare_descriptor()
        for sock in self._listeners:
            loop.add_reader(sock.fileno(), self._accept_ready, sock)
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="connection-sweeper")

    @property
    def address(self) -> str:
        """``host:port`` as it listens (the real port when it was 0)."""
        return f"{self.host}:{self.port}"

    # -- accepting ------------------------------------------------------------------------

    def _accept_ready(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS or exc.errno in _OUT_OF_MEMORY:
                    self._out_of_resources(listener, exc)
                    return
                # the client gave up before we accepted it (ECONNABORTED, ...): next one
                log.debug("accept failed: %s", exc)
                continue
            self._backoff = 0.0
            self._make_room()
            if self.open_count + self._accepting >= self.limits.max_connections:
                self.refused += 1
                self.log.warning(
                    "max-connections",
                    "refused a connection: %d connections open (max_connections %d)",
                    self.open_count + self._accepting,
                    self.limits.max_connections,
                )
                _refuse(
                    sock,
                    _refusal(
                        Code.TOO_MANY_REQUESTS,
                        f"the broker has {self.open_count} connections, its limit "
                        f"(max_connections {self.limits.max_connections}); retry later",
                    ),
                )
                continue
            self._accepting += 1
            task = asyncio.ensure_future(self._connect(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _make_room(self) -> None:
        """Before accepting: if the connections still in their handshake are at their cap, or
        every connection slot is taken while some are, close the one waiting longest."""
        limits = self.limits
        waiting = len(self.pending)
        full = self.open_count + self._accepting >= limits.max_connections
        if waiting == 0 or (waiting < limits.pending_cap and not full):
            return
        self.log.warning(
            "max-pending",
            "closed a connection still in its handshake to make room: %d in their handshake "
            "(max_pending_connections %d), %d connections (max_connections %d)",
            waiting,
            limits.pending_cap,
            self.open_count + self._accepting,
            limits.max_connections,
        )
        self.refused += 1
        oldest, setup = next(iter(self.pending.items()))
        if not oldest.connected and setup is not None:  # its TLS handshake is still going on
            setup.cancel()
            self._closed(oldest)
            return
        del self.pending[oldest]
        oldest.fail(
            TooManyRequestsError(
                f"too many connections are in their handshake (max_pending_connections "
                f"{limits.pending_cap}): this one waited longest; retry"
            )
        )

    async def _connect(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        made: list[Served] = []

        def factory() -> asyncio.BaseProtocol:
            # called at once, before a TLS handshake: from then on the connection counts
            self._accepting -= 1
            made.append(self._new_connection(asyncio.current_task()))
            return cast(asyncio.BaseProtocol, made[0])

        try:
            await loop.connect_accepted_socket(
                factory,
                sock,
                ssl=self._tls,
                ssl_handshake_timeout=self.limits.hello_timeout if self._tls else None,
            )
        except (OSError, asyncio.CancelledError) as exc:
            # a failed TLS handshake, or one closed to make room (its transport closed it)
            log.debug("setting up an accepted connection failed: %r", exc)
            sock.close()
            if made and not made[0].connected:  # asyncio never tells it: forget it here
                self._closed(made[0])
        finally:
            if not made:
                self._accepting -= 1

    def _out_of_resources(self, listener: socket.socket, exc: OSError) -> None:
        """No descriptor (or memory) for a new connection: answer one waiting client with the
        spare descriptor's help, and pause accepting for a moment."""
        answered = False
        if exc.errno in _OUT_OF_DESCRIPTORS and self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                sock, _ = listener.accept()
            except OSError:
                pass
            else:
                self.refused += 1
                answered = True
                _refuse(
                    sock,
                    _refusal(
                        Code.SERVICE_NOT_AVAILABLE,
                        "the broker is out of file descriptors and cannot take a connection "
                        f"({errno.errorcode.get(exc.errno or 0, exc.errno)}); retry later or "
                        "use another broker",
                    ),
                )
            self._spare = _spare_descriptor()
        self.log.error(
            f"accept-{exc.errno}",
            "cannot accept connections: %s (%d open); answering with an error and retrying",
            exc,
            self.open_count,
        )
        if answered and self._spare is not None:
            return  # the next wakeup answers the next waiting client the same way
        # nothing could be done for the client: stop polling the listener for a while
        self._backoff = min(_ACCEPT_BACKOFF_MAX, max(_ACCEPT_BACKOFF_MIN, self._backoff * 2))
        loop = asyncio.get_running_loop()
        for sock in self._listeners:
            loop.remove_reader(sock.fileno())
        self._resume = loop.call_later(self._backoff, self._resume_accepting)

    def _resume_accepting(self) -> None:
        self._resume = None
        if self._spare is None:
            self._spare = _spare_descriptor()
        loop = asyncio.get_running_loop()
        for sock in self._listeners:
            loop.add_reader(sock.fileno(), self._accept_ready, sock)

    def _new_connection(self, setup: asyncio.Task[Any] | None = None) -> Served:
        connection: Served
        if self._remoting is None:
            connection = self._native_connection()
        else:
            connection = ProtocolSniffer(
                self._hand_over,
                self._closed,
                hello_timeout=self.limits.hello_timeout,
                clock=self._clock,
            )
            self.others.add(connection)
        self.pending[connection] = setup
        return connection

    def _native_connection(self) -> ServerConnection:
        connection = ServerConnection(
            self._handlers,
            self._closed,
            self._tasks,
            limits=self.limits,
            budget=self.budget,
            clock=self._clock,
            bad_input_log=self.log,
            latency=self.latency,
            on_established=self._established,
        )
        self.connections.add(connection)
        return connection

    def _hand_over(self, sniffer: ProtocolSniffer, protocol: WireProtocol) -> Served:
        """The connection a sniffed client is served by, in the sniffer's place in the books
        (its place among those in their handshake too: the oldest stays the first closed)."""
        self.others.discard(sniffer)
        chosen: Served
        if protocol is WireProtocol.REMOTING and self._remoting is not None:
            chosen = self._remoting.connection(self._share, sniffer.opened_at)
            self.others.add(chosen)
        else:  # native, or neither: the native side answers what it cannot read
            native = self._native_connection()
            native.opened_at = sniffer.opened_at
            chosen = native
        if sniffer in self.pending:
            self.pending = {
                (chosen if held is sniffer else held): setup for held, setup in self.pending.items()
            }
        return chosen

    def _established(self, connection: Served) -> None:
        self.pending.pop(connection, None)

    def _closed(self, connection: Served) -> None:
        if isinstance(connection, ServerConnection):
            if connection not in self.connections:
                return  # already forgotten (a TLS handshake that never completed)
            self.connections.discard(connection)
            self.pending.pop(connection, None)
            if self._on_close_hook is not None:
                self._on_close_hook(connection)
            return
        self.others.discard(connection)
        self.pending.pop(connection, None)

    # -- time limits ----------------------------------------------------------------------

    def sweep(self) -> None:
        """Close connections past their HELLO or idle timeout."""
        now = self._clock()
        for connection in [*self.connections, *self.others]:
            connection.expire(now)

    async def _sweep_forever(self) -> None:
        limits = self.limits
        interval = min(_SWEEP_INTERVAL_MAX, limits.hello_timeout / 4, limits.idle_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            self.sweep()

    # -- shutdown -------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop accepting, release the spare descriptor, close every connection and cancel the
        requests still running."""
        loop = asyncio.get_running_loop()
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        for sock in self._listeners:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._listeners = []
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for connection in [*self.connections, *self.others]:
            connection.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
