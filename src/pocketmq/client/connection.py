"""One client connection to a broker or name server: pipelined requests matched by id.

Any number of requests may be in flight; each waits on its own future. When the connection
breaks, every waiting request fails with :class:`BrokerConnectionError` at once, so callers can
retry elsewhere instead of waiting for a timeout. One-way requests from the server (consumer-group
changes, transaction checks) go to a callback.

An error response with request id 0 is about the connection itself (a framing error, the
broker's connection limit, no file descriptor left): every waiting request fails with it, so the
caller sees the broker's reason, typed, rather than a bare "connection lost". A connection idle
for half the server's idle timeout (from the HELLO reply) is closed by the client, so the server
never closes it under a request just being sent; the pool reopens it on next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import ssl
import time
from asyncio.base_events import BaseEventLoop
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import msgspec

from pocketmq.errors import (
    BrokerConnectionError,
    Code,
    ProtocolError,
    RequestTimeoutError,
    error_from_code,
)
from pocketmq.protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
    foreign_protocol,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import ClientHandshake, normalize_address
from pocketmq.protocol.body import DECODERS, encode_body_fast
from pocketmq.version import VERSION

__all__ = ["ClientConnection", "PushHandler", "SlowWatch", "clock_of", "connect"]

log = logging.getLogger("pocketmq.client")

T = TypeVar("T")
PushHandler = Callable[["ClientConnection", int, bytes], None]
SlowWatch = tuple[float, Callable[["asyncio.Future[Any]", Callable[[BaseException], None]], None]]
"""``(after, start)``: when a request has no answer ``after`` seconds in, ``start(future, abort)``
is called (the producer then watches the topic's route); ``abort(error)`` ends the request at
once with ``error``."""

CLIENT_VERSION: Final = VERSION
_LONG_POLLS: Final = frozenset({RequestCode.PULL, RequestCode.POP})
# members read once: on Python 3.11 every ``Enum.MEMBER`` read goes through the enum type's
# ``__getattr__`` hook (~900 instructions), and these are read for every request and answer
# (docs/benchmarks.md, "A lone send, both sides")
_REQUEST: Final = FrameKind.REQUEST
_RESPONSE: Final = FrameKind.RESPONSE
_SUCCESS: Final = Code.SUCCESS
_Waiting = tuple[
    "asyncio.Future[Any]",
    "type[Any] | None",
    float,
    RequestCode,
    float,
    float,
    "Callable[[asyncio.Future[Any], Callable[[BaseException], None]], None] | None",
    "Callable[[Any], None] | None",
]
"""A request waiting for its answer: ``(future, reply type, due, code, timeout, expires,
start, early)``. ``due`` is when the connection's watchdog next looks at it: its slow watch's
time while ``start`` is set (the watch not started yet), else its expiry (``expires``).
``early`` is called with a successful answer as it is read (see :meth:`ClientConnection.begin`)."""


# what answers in these protocols on a pocketmq machine (docs/cli.md, "Errors")
_FOREIGN_PORTS: Final = {
    "HTTP/1.x": "like a broker's metrics and dashboard port (--http-port, 5557)",
    "HTTP/2": "like a broker's gRPC port for the official RocketMQ clients (--grpc-port, 8081) "
    "or etcd",
}


#: bytes read from the socket at most per read: asyncio's own read size for a stream
_READ_SIZE: Final = 256 * 1024


class ClientConnection(asyncio.BufferedProtocol):
    """One connection to a broker or name server (see the module docstring).

    A buffered protocol: the socket is read into one buffer per connection, kept for its life,
    and each read's bytes are copied out to their exact size. A plain protocol is handed a
    ``recv(256 KiB)`` result: glibc maps each such buffer fresh, shrinks it to the bytes read
    and unmaps it when freed (mmap, mremap and munmap per read: ~30 µs of a lone send's client
    CPU; docs/benchmarks.md, "The client's reads, one buffer per connection (issue 32)").
    """

    def __init__(self, address: str, on_push: PushHandler | None) -> None:
        self.address = address
        self._on_push = on_push
        self._decoder = FrameDecoder()
        self._read_buffer = memoryview(bytearray(_READ_SIZE))
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, _Waiting] = {}
        self._ids = itertools.count(1)
        self._closed: asyncio.Future[None] | None = None
        self._can_write: asyncio.Event = asyncio.Event()
        self._can_write.set()
        self.paused = False
        """The socket's buffer is full (``_can_write`` cleared): :meth:`request` waits for it
        to drain, and a caller of :meth:`begin` should await :meth:`request` instead."""
        self._clock: Callable[[], float] = time.monotonic  # the loop's clock (connection_made)
        # one timer for every waiting request's slow watch and expiry, at the earliest due
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = math.inf
        self._outgoing: list[bytes] = []
        self.last_id = 0
        """The id of the request written last (:meth:`begin`'s caller forgets it by id)."""
        self._last_active = 0.0
        self._idle_check: asyncio.TimerHandle | None = None
        self._refusal: Exception | None = None  # the broker's reason for closing, if it gave one
        # the peer's first bytes, kept until a frame decodes: they tell a wrong port
        self._first_bytes: bytes | None = b""
        self.hello: w.HelloResponse | None = None

    # -- asyncio.BufferedProtocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio: the socket is connected."""
        # a stream transport, though not always an asyncio.Transport subclass (uvloop's is
        # not): check for what is used, not for the class
        self._transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._clock = clock_of(loop)

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio: the socket closed; every waiting request fails at once, with the broker's
        reason when it gave one.
        """
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog, self._watchdog_at = None, math.inf
        self._fail_all(
            self._refusal
            or self._not_native()
            or BrokerConnectionError(f"connection to {self.address} lost", address=self.address)
        )
        self._transport = None
        self._can_write.set()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        """asyncio: the socket buffer is full; new requests wait (backpressure)."""
        self.paused = True
        self._can_write.clear()

    def resume_writing(self) -> None:
        """asyncio: the socket buffer drained."""
        self.paused = False
        self._can_write.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        """asyncio: where the next read goes (the connection's buffer; the class doc)."""
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        """asyncio: ``nbytes`` were read into the buffer; they are copied out as ``bytes``
        (what :meth:`data_received` and the frame decoder's fast path take) before the next
        read reuses the buffer."""
        self.data_received(self._read_buffer[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        """asyncio: bytes arrived; complete frames answer requests or go to the push handler."""
        self._last_active = self._clock()
        if self._first_bytes is not None and len(self._first_bytes) < 16:
            self._first_bytes += data[: 16 - len(self._first_bytes)]
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            error = self._not_native()
            if error is None:
                log.error("broker %s sent a malformed frame: %s", self.address, exc)
                error = BrokerConnectionError(str(exc), address=self.address)
            self._fail_all(error)
            self.close()
            return
        if frames:
            self._first_bytes = None
        for frame in frames:
            if frame.kind == _RESPONSE:
                waiting = self._pending.pop(frame.request_id, None)
                if waiting is None:
                    if frame.request_id == 0 and frame.code != _SUCCESS:
                        # about the connection (docs/protocol.md "Errors"): the broker closes it
                        self._refusal = error_from_code(frame.code, _remark(frame.body))
                        self._fail_all(self._refusal)
                        continue
                    if frame.code != _SUCCESS:
                        remark = _remark(frame.body)
                        log.error("broker %s: %s", self.address, remark or frame.code)
                    continue
                future, reply = waiting[0], waiting[1]
                if future.done():  # timed out or cancelled meanwhile
                    continue
                if frame.code != _SUCCESS:
                    future.set_exception(error_from_code(frame.code, _remark(frame.body)))
                elif reply is None:
                    future.set_result(None)
                else:
                    decoder = DECODERS.get(reply)  # decode_body's own, without its frame
                    try:
                        if decoder is None:  # the first of its type: decode_body makes it
                            answer = decode_body(frame.body, reply)
                        else:
                            try:
                                answer = decoder.decode(frame.body)
                            except Exception:  # decode_body names what is wrong
                                answer = decode_body(frame.body, reply)
                    except ProtocolError as exc:
                        future.set_exception(exc)
                        continue
                    early = waiting[7]
                    if early is not None:
                        try:
                            early(answer)
                        except Exception:  # the caller's bug: its request still gets the answer
                            log.exception("handing on an answer from %s failed", self.address)
                    future.set_result(answer)
            elif self._on_push is not None:
                try:
                    self._on_push(self, frame.code, frame.body)
                except Exception:
                    log.exception("handling a push from %s failed", self.address)

    def _not_native(self) -> BrokerConnectionError | None:
        """The error for a peer that is not a pocketmq native port, judged by the first bytes
        it sent before any frame (docs/cli.md, "Errors"); None when they do not tell."""
        what = foreign_protocol(self._first_bytes) if self._first_bytes else None
        if what is None:
            return None
        if what == "TLS":
            text = (
                f"{self.address} answered in TLS: it expects a TLS client; set "
                "POCKETMQ_TLS_CA=ca.pem (or POCKETMQ_TLS=1), ClientConfig(tls=...) in the SDK "
                "(docs/security.md)"
            )
        else:
            text = (
                f"{self.address} is not a pocketmq native port: it answered in {what}, "
                f"{_FOREIGN_PORTS[what]}; use a broker's native port (--port, 10911) or a name "
                "server's (9876)"
            )
        return BrokerConnectionError(text, address=self.address)

    # -- requests -------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        """Queue a frame; everything queued in one loop iteration leaves in one write."""
        loop = asyncio.get_running_loop()
        self._last_active = self._clock()
        if not self._outgoing:
            loop.call_soon(self._flush)
        self._outgoing.append(frame)

    def close_when_idle(self, server_idle_timeout: float) -> None:
        """Close this connection once it has been unused for half ``server_idle_timeout`` with
        nothing in flight: before the server would close it, possibly under a request."""
        if server_idle_timeout <= 0:
            return
        limit = server_idle_timeout / 2
        loop = asyncio.get_running_loop()
        self._last_active = loop.time()

        def check() -> None:
            self._idle_check = None
            if not self.is_open:
                return
            idle = loop.time() - self._last_active
            if self._pending or self._outgoing or idle < limit:
                self._idle_check = loop.call_later(max(limit - idle, limit / 4), check)
            else:
                log.debug("closing the idle connection to %s", self.address)
                self.close()

        self._idle_check = loop.call_later(limit, check)

    def _flush(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        if outgoing and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(outgoing) if len(outgoing) > 1 else outgoing[0])

    def peer_address(self) -> str:
        """The server's ``ip:port`` as this socket sees it (normalized): what the handshake's
        proof is bound to, so a relay's address is what a relayed client signs."""
        peer = self._transport.get_extra_info("peername") if self._transport else None
        if isinstance(peer, tuple) and len(peer) >= 2:
            return normalize_address(str(peer[0]), int(peer[1]))
        return ""

    @property
    def is_open(self) -> bool:
        """Whether requests can be written now."""
        return self._transport is not None and not self._transport.is_closing()

    def _next_id(self) -> int:
        """The next request id; never 0, which marks connection-level errors."""
        return next(self._ids) & 0xFFFFFFFF or next(self._ids) & 0xFFFFFFFF

    def send_request(
        self, code: RequestCode, body: msgspec.Struct, reply: type[T] | None
    ) -> asyncio.Future[T]:
        """Queue the request and return the future of its response (no timeout)."""
        return self.begin(code, body, reply, math.inf)

    def begin(
        self,
        code: RequestCode,
        body: msgspec.Struct,
        reply: type[T] | None,
        timeout: float,
        slow: SlowWatch | None = None,
        early: Callable[[T], None] | None = None,
    ) -> asyncio.Future[T]:
        """Write the request and return the future of its answer, which fails with
        :class:`RequestTimeoutError` after ``timeout`` (``slow``: :data:`SlowWatch`). What
        :meth:`request` does without its coroutine, for a caller that awaits the future itself
        (the producer's send: docs/benchmarks.md, "Producer send path, fewer levels"); it does
        not wait while the connection is paused for writing (see :attr:`paused`).

        ``early`` is called with a successful answer in the loop turn that reads it, before the
        future is resolved (whose waiter resumes a turn later): a push consumer's pull hands its
        messages to an idle worker there (client/consumer/pull.py). It is not called for an
        error, a timeout or a request given up on; what it raises is logged.

        The frame leaves at once when it is the only one in flight (nothing queued, no request
        waiting for an answer); else it is queued, and everything queued in one loop iteration
        leaves in one write. Coalescing pays off only when others are in flight; a lone request
        would lose an event-loop turn to it (docs/design.md "Clients")."""
        transport = self._transport
        if transport is None or transport.is_closing():
            if self._refusal is not None:
                raise self._refusal
            raise BrokerConnectionError(f"not connected to {self.address}", address=self.address)
        request_id = self.last_id = self._next_id()
        # encode_body's own encoder method, without its frame
        frame = encode_frame(_REQUEST, code, request_id, encode_body_fast(body))  # may raise
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        now = self._last_active = self._clock()
        if self._outgoing or self._pending:
            self._write(frame)
        else:
            transport.write(frame)
        if slow is not None and slow[0] < timeout:
            due = now + slow[0]
            self._pending[request_id] = (
                future,
                reply,
                due,
                code,
                timeout,
                now + timeout,
                slow[1],
                early,
            )
        else:
            due = now + timeout
            self._pending[request_id] = (future, reply, due, code, timeout, due, None, early)
        if due < self._watchdog_at:
            self._arm(due)
        return future

    async def request(
        self,
        code: RequestCode,
        body: msgspec.Struct,
        reply: type[T],
        timeout: float,
        *,
        slow: SlowWatch | None = None,
        early: Callable[[T], None] | None = None,
    ) -> T:
        """Send a request and wait up to ``timeout`` for its answer, decoded as ``reply``; an
        error answer raises its typed error, no answer :class:`RequestTimeoutError`. ``slow``:
        what to start when the answer is late (:data:`SlowWatch`); ``early``: what to call with
        the answer as it is read (:meth:`begin`).
        """
        if self.paused:
            try:  # a peer that reads nothing (frozen) must not hold the caller for ever
                async with asyncio.timeout(timeout):
                    await self._can_write.wait()
            except TimeoutError:
                raise RequestTimeoutError(
                    f"{code.name} to {self.address}: the connection took nothing in {timeout:.1f}s",
                    address=self.address,
                ) from None
        future = self.begin(code, body, reply, timeout, slow, early)
        request_id = self.last_id
        try:
            return await future
        except asyncio.CancelledError:
            self.forget(request_id, code)
            raise

    def forget(self, request_id: int, code: RequestCode) -> None:
        """The caller stopped waiting for request ``request_id`` (cancelled): drop it; a long
        poll given up on is cancelled at the broker too, which then stops waiting instead of
        taking messages for nobody (docs/protocol.md, CANCEL)."""
        self._pending.pop(request_id, None)
        if code in _LONG_POLLS and self.is_open:
            self.oneway(RequestCode.CANCEL, w.CancelRequest(request_id))

    # -- the watchdog: slow watches and expiries ------------------------------------------
    #
    # One timer per connection, at the earliest due time of the requests waiting, instead of
    # one per request: a timer per request (a Python ``TimerHandle``, its heap push and pop
    # through Python's ``__lt__``, its cancel) was ~10 % of a lone send's client instructions
    # (docs/benchmarks.md, "Producer send path, fewer levels"). An answered request leaves the
    # timer armed; when it fires with nothing due it re-arms at the next due time, or, with
    # nothing waiting, is gone. Each request still starts its watch and expires at its own
    # time.

    def _arm(self, due: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog_at = due
        self._watchdog = asyncio.get_running_loop().call_at(due, self._on_watchdog)

    def _on_watchdog(self) -> None:
        """Start the watches and expire the requests now due; re-arm at the next due time."""
        # a timer runs when its time is within the clock's resolution: what was due at the
        # armed time is due now
        now = max(self._clock(), self._watchdog_at)
        self._watchdog, self._watchdog_at = None, math.inf
        pending = self._pending
        for request_id, waiting in list(pending.items()):
            if waiting[2] > now or pending.get(request_id) is not waiting:
                continue  # not due, or answered or aborted meanwhile (by a watch)
            future, reply, _, code, timeout, expires, start, early = waiting
            if future.done():  # ended without its answer being read (cancelled, set)
                del pending[request_id]
                continue
            if start is not None:  # late: from now on it waits for its expiry
                pending[request_id] = (future, reply, expires, code, timeout, expires, None, early)
                try:
                    start(future, functools.partial(self._abort, request_id))
                except Exception:
                    log.exception("watching a late %s to %s failed", code.name, self.address)
                continue
            del pending[request_id]
            future.set_exception(
                RequestTimeoutError(
                    f"{code.name} to {self.address} got no answer in {timeout:.1f}s",
                    address=self.address,
                )
            )
        if pending:
            due = min(waiting[2] for waiting in pending.values())
            if due < self._watchdog_at:  # (a watch may have made a request meanwhile)
                self._arm(due)

    def _abort(self, request_id: int, error: BaseException) -> None:
        waiting = self._pending.pop(request_id, None)
        if waiting is not None and not waiting[0].done():
            waiting[0].set_exception(error)

    def oneway(self, code: RequestCode, body: msgspec.Struct) -> None:
        """Write a request that gets no answer (reports, fire-and-forget sends)."""
        if not self.is_open:
            raise BrokerConnectionError(f"not connected to {self.address}", address=self.address)
        assert self._transport is not None
        request_id = self._next_id()
        self._write(encode_frame(FrameKind.ONEWAY, code, request_id, encode_body(body)))

    def _fail_all(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for waiting in pending.values():
            if not waiting[0].done():
                waiting[0].set_exception(error)

    def close(self) -> None:
        """Close the socket; waiting requests fail with a connection error."""
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        """Wait until the socket is closed."""
        if self._closed is not None:
            await self._closed


def clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time`` itself, or ``time.monotonic`` where that is all it does (asyncio's own
    loops): the same clock without a Python frame per reading (a request reads it once, an
    answer once)."""
    if getattr(loop.time, "__func__", None) is BaseEventLoop.time:
        return time.monotonic
    return loop.time


def _remark(body: bytes) -> str:
    try:
        return decode_body(body, w.ErrorBody).remark
    except ProtocolError:
        return ""


async def connect(
    address: str,
    client_id: str,
    *,
    timeout: float,
    on_push: PushHandler | None = None,
    tls: ssl.SSLContext | None = None,
    credentials: tuple[str, str] = ("", ""),
) -> ClientConnection:
    """Open a connection (over TLS with ``tls``) and complete the handshake: HELLO, and with
    ``credentials`` (access key, secret key) the mutual proof — the server must ask for it and
    prove it knows the secret too (:class:`~pocketmq.protocol.auth.ClientHandshake`)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise BrokerConnectionError(f"bad address {address!r}: expected host:port", address=address)
    loop = asyncio.get_running_loop()
    try:
        _, connection = await asyncio.wait_for(
            loop.create_connection(
                lambda: ClientConnection(address, on_push),
                host.strip("[]"),
                int(port),
                ssl=tls,
                server_hostname=host.strip("[]") if tls is not None else None,
            ),
            timeout,
        )
    except (OSError, TimeoutError) as exc:
        raise BrokerConnectionError(f"cannot connect to {address}: {exc}", address=address) from exc
    handshake = ClientHandshake(
        client_id,
        *credentials,
        missing_credentials="set ClientConfig(access_key=..., secret_key=...) or "
        "POCKETMQ_ACCESS_KEY/POCKETMQ_SECRET_KEY",
    )
    try:
        connection.hello = await connection.request(
            RequestCode.HELLO,
            handshake.hello(CLIENT_VERSION, PROTOCOL_VERSION),
            w.HelloResponse,
            timeout,
        )
        answer = handshake.authenticate(connection.hello, connection.peer_address(), address)
        if answer is not None:
            handshake.check(
                await connection.request(
                    RequestCode.AUTHENTICATE, answer, w.AuthenticateResponse, timeout
                )
            )
    except BaseException:
        connection.close()
        raise
    connection.close_when_idle(connection.hello.idle_timeout_ms / 1000)
    return connection


async def close_quietly(connection: ClientConnection) -> None:
    """Close ``connection`` and wait a little for it, ignoring errors: for shutdown paths."""
    connection.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.wait_closed(), 1.0)
