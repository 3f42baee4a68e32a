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
import ssl
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

__all__ = ["ClientConnection", "PushHandler", "SlowWatch", "connect"]

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
# what answers in these protocols on a pocketmq machine (docs/cli.md, "Errors")
_FOREIGN_PORTS: Final = {
    "HTTP/1.x": "like a broker's metrics and dashboard port (--http-port, 5557)",
    "HTTP/2": "like a broker's gRPC port for the official RocketMQ clients (--grpc-port, 8081) "
    "or etcd",
}


class ClientConnection(asyncio.Protocol):
    """One connection to a broker or name server (see the module docstring)."""

    def __init__(self, address: str, on_push: PushHandler | None) -> None:
        self.address = address
        self._on_push = on_push
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], type[Any] | None]] = {}
        self._ids = itertools.count(1)
        self._closed: asyncio.Future[None] | None = None
        self._can_write: asyncio.Event = asyncio.Event()
        self._can_write.set()
        self._outgoing: list[bytes] = []
        self._last_id = 0
        self._last_active = 0.0
        self._idle_check: asyncio.TimerHandle | None = None
        self._refusal: Exception | None = None  # the broker's reason for closing, if it gave one
        # the peer's first bytes, kept until a frame decodes: they tell a wrong port
        self._first_bytes: bytes | None = b""
        self.hello: w.HelloResponse | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio: the socket is connected."""
        # a stream transport, though not always an asyncio.Transport subclass (uvloop's is
        # not): check for what is used, not for the class
        self._transport = cast(asyncio.Transport, transport)
        self._closed = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio: the socket closed; every waiting request fails at once, with the broker's
        reason when it gave one.
        """
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None
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
        self._can_write.clear()

    def resume_writing(self) -> None:
        """asyncio: the socket buffer drained."""
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        """asyncio: bytes arrived; complete frames answer requests or go to the push handler."""
        self._last_active = asyncio.get_running_loop().time()
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
                future, reply = waiting
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
        self._last_active = loop.time()
        if not self._outgoing:
            loop.call_soon(self._flush)
        self._outgoing.append(frame)

    def _write_now(self, frame: bytes) -> None:
        """Write a frame at once when it would be the only one in flight: nothing queued, no
        request waiting for an answer. Coalescing frames of one loop iteration pays off only
        when others are in flight; a lone request would lose an event-loop turn to it
        (docs/design.md "Clients")."""
        if self._outgoing or self._pending:
            self._write(frame)
            return
        assert self._transport is not None  # is_open was checked by the caller
        self._last_active = asyncio.get_running_loop().time()
        self._transport.write(frame)

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
        if not self.is_open:
            if self._refusal is not None:
                raise self._refusal
            raise BrokerConnectionError(f"not connected to {self.address}", address=self.address)
        assert self._transport is not None
        request_id = self._last_id = self._next_id()
        # encode_body's own encoder method, without its frame
        frame = encode_frame(_REQUEST, code, request_id, encode_body_fast(body))  # may raise
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._write_now(frame)
        self._pending[request_id] = (future, reply)
        return future

    async def request(
        self,
        code: RequestCode,
        body: msgspec.Struct,
        reply: type[T],
        timeout: float,
        *,
        slow: SlowWatch | None = None,
    ) -> T:
        """Send a request and wait up to ``timeout`` for its answer, decoded as ``reply``; an
        error answer raises its typed error, no answer :class:`RequestTimeoutError`. ``slow``:
        what to start when the answer is late (:data:`SlowWatch`).
        """
        if not self._can_write.is_set():
            try:  # a peer that reads nothing (frozen) must not hold the caller for ever
                async with asyncio.timeout(timeout):
                    await self._can_write.wait()
            except TimeoutError:
                raise RequestTimeoutError(
                    f"{code.name} to {self.address}: the connection took nothing in {timeout:.1f}s",
                    address=self.address,
                ) from None
        future = self.send_request(code, body, reply)
        request_id = self._last_id
        loop = asyncio.get_running_loop()
        # one timer per request at a time (the last of ``timers``): with ``slow``, the watch's,
        # which sets the expiry's when it fires; an answer in time, nearly every one, then
        # costs one timer, not two
        timers: list[asyncio.TimerHandle] = []
        if slow is not None and slow[0] < timeout:
            now = loop.time()
            late = (timers, request_id, code, timeout, now + timeout, slow[1], future)
            timers.append(loop.call_at(now + slow[0], self._late, *late))
        else:
            timers.append(loop.call_later(timeout, self._expire, request_id, code, timeout))
        try:
            return await future
        except asyncio.CancelledError:
            # a long poll given up on: the broker stops waiting instead of taking messages
            # for nobody (docs/protocol.md, CANCEL)
            self._pending.pop(request_id, None)
            if code in _LONG_POLLS and self.is_open:
                self.oneway(RequestCode.CANCEL, w.CancelRequest(request_id))
            raise
        finally:
            timers[-1].cancel()

    def _late(
        self,
        timers: list[asyncio.TimerHandle],
        request_id: int,
        code: RequestCode,
        timeout: float,
        expires: float,
        start: Callable[[asyncio.Future[Any], Callable[[BaseException], None]], None],
        future: asyncio.Future[Any],
    ) -> None:
        """A request's answer is late (:data:`SlowWatch`): set its expiry, then start the
        watch with a way to abort the request."""
        loop = asyncio.get_running_loop()
        timers.append(loop.call_at(expires, self._expire, request_id, code, timeout))
        start(future, functools.partial(self._abort, request_id))

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

    def _expire(self, request_id: int, code: RequestCode, timeout: float) -> None:
        waiting = self._pending.pop(request_id, None)
        if waiting is not None and not waiting[0].done():
            waiting[0].set_exception(
                RequestTimeoutError(
                    f"{code.name} to {self.address} got no answer in {timeout:.1f}s",
                    address=self.address,
                )
            )

    def _fail_all(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(error)

    def close(self) -> None:
        """Close the socket; waiting requests fail with a connection error."""
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        """Wait until the socket is closed."""
        if self._closed is not None:
            await self._closed


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
