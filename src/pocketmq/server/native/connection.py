"""One TCP connection speaking the native protocol, server side.

An ``asyncio.Protocol`` rather than streams: frames are decoded straight from ``data_received``,
fast handlers answer inline and every response produced by one read goes out in one write. Slow
handlers (long polls, sync-flushed sends) run as tasks so they never hold up the requests behind
them. A framing error is answered and closes only this connection.

What a connection may hold is bounded (:mod:`pocketmq.server.native.limits`): until its handshake
is complete (HELLO, and AUTHENTICATE on a server that requires it) it accepts only small frames,
one at a time, and only those two requests; the bytes it buffers for frames still arriving count
against the server's :class:`~pocketmq.server.native.limits.BufferBudget`. Bad input is answered
with a typed error and logged at most once per interval
(:class:`~pocketmq.server.ratelog.RateLimitedLog`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import msgspec

from pocketmq.errors import (
    BrokerError,
    Code,
    LocalProtocolError,
    NoPermissionError,
    PocketMQError,
    ProtocolError,
)
from pocketmq.protocol import (
    MAX_FRAME_BODY,
    FrameDecoder,
    FrameKind,
    RequestCode,
    encode_body,
    encode_frame,
)
from pocketmq.protocol.body import DECODERS, encode_body_fast
from pocketmq.protocol.structs import REQUESTS, ErrorBody, decode_body
from pocketmq.server.auth.credential import Credential
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.native.limits import BufferBudget, ConnectionLimits
from pocketmq.server.pacing import YIELD_AFTER_BYTES
from pocketmq.server.ratelog import RateLimitedLog
from pocketmq.server.rpcstats import RpcLatency
from pocketmq.server.serving import JOIN_LIMIT, Joined, ServedConnection

__all__ = ["JOIN_LIMIT", "Handler", "HandlerTable", "Joined", "ServerConnection"]

log = logging.getLogger("pocketmq.server")

Handler = Callable[
    ["ServerConnection", Any], "msgspec.Struct | Awaitable[msgspec.Struct | None] | Joined | None"
]
HandlerTable = dict[int, Handler]


def _wire_code(exc: PocketMQError) -> int:
    """The response code an exception is answered with (see ``_respond_exception``)."""
    if isinstance(exc, (BrokerError, ProtocolError)):
        return exc.wire_code
    return Code.MESSAGE_ILLEGAL  # an argument refused (docs/protocol.md, "Errors")


_BEFORE_AUTHENTICATION: frozenset[int] = frozenset({RequestCode.HELLO, RequestCode.AUTHENTICATE})
_LONG_POLLS: frozenset[int] = frozenset({RequestCode.PULL, RequestCode.POP})
_REQUEST_NAMES: dict[int, str] = {code.value: code.name for code in RequestCode}
_RESPONSE_NAMES: dict[int, str] = {code.value: code.name for code in Code}


# members read once: on Python 3.11 every ``Enum.MEMBER`` read goes through the enum type's
# ``__getattr__`` hook, and these are read for every frame
_RESPONSE = FrameKind.RESPONSE
_ONEWAY = FrameKind.ONEWAY
_HELLO = RequestCode.HELLO
_SUCCESS = Code.SUCCESS

# (request code, response code) -> the latency metric's labels, built once per pair
_LABELS: dict[tuple[int, int], tuple[str, str, str]] = {}


def _name(value: int, names: dict[int, str]) -> str:
    """A code's name for metric labels (its number when unknown)."""
    return names.get(value) or str(value)


def _labels(code: int, response: int) -> tuple[str, str, str]:
    """The latency metric's labels of a (request code, response code) pair, made once."""
    key = _LABELS.get((code, response))
    if key is None:
        key = _LABELS[(code, response)] = (
            "native",
            _name(code, _REQUEST_NAMES),
            _name(response, _RESPONSE_NAMES),
        )
    return key


class ServerConnection(ServedConnection):
    """One native-protocol connection: frames decoded straight from ``data_received``, requests
    dispatched through the handler table, responses of one loop iteration written together, and the
    limits of docs/protocol.md "Limits" enforced."""

    def __init__(
        self,
        handlers: HandlerTable,
        on_close: Callable[[ServerConnection], None],
        tasks: set[asyncio.Task[None]],
        *,
        limits: ConnectionLimits | None = None,
        budget: BufferBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        bad_input_log: RateLimitedLog | None = None,
        latency: RpcLatency | None = None,
        on_established: Callable[[ServerConnection], None] | None = None,
    ) -> None:
        self.limits = limits or ConnectionLimits()
        super().__init__(clock, budget or BufferBudget(self.limits.max_buffered_bytes), tasks)
        self._handlers = handlers
        self._latency = latency
        self._on_established = on_established
        self.auth_required = False  # set by a HELLO that issued a challenge
        self.user = ""  # the access key that authenticated this connection
        self.credential: Credential | None = None  # and what stops it when the user goes
        # the operations this connection's identity may ask for (None: any the port serves)
        self.permitted: frozenset[int] | None = None
        self.established = False  # the handshake is complete (see _check_established)
        self.producing = False  # it sent a message (the connection metrics)
        self._on_close = on_close
        # shared by a server's connections: one line per kind of bad input per interval
        self.bad_input_log = bad_input_log or RateLimitedLog(log)
        self._decoder = FrameDecoder(self.limits.max_frame_before_hello)
        self._greeted = False
        self.client_id = ""
        self._next_request_id = 1
        self.opened_at = self.last_seen = clock()

    @property
    def greeted(self) -> bool:
        """True once a HELLO was answered (the HELLO handler sets it)."""
        return self._greeted

    @greeted.setter
    def greeted(self, value: bool) -> None:
        self._greeted = value

    def _check_established(self) -> None:
        """After HELLO or AUTHENTICATE: is the handshake complete? Then frames of the full
        size are read, and the server stops counting this connection as pending."""
        if self.established or not self._greeted or (self.auth_required and not self.user):
            return
        self.established = True
        self._decoder.max_body = MAX_FRAME_BODY
        if self._on_established is not None:
            self._on_established(self)

    def close_after_reply(self) -> None:
        """Close this connection once the answer to the request being handled is written
        (a failed login: one guess per connection); nothing behind it is read."""
        self._close_after_reply = True

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport and the peer's address (for logs)."""
        self._note_transport(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        """Give back this connection's share of the buffer budget, stop its long polls (nobody
        would receive what they took) and tell the server (the broker then drops the client's
        registrations made on this connection)."""
        self._drop()
        self._on_close(self)

    def cancel(self, request_id: int) -> None:
        """The client gave up on long poll ``request_id`` (``CANCEL``): stop waiting for it."""
        task = self._polls.get(request_id)
        if task is not None:
            task.cancel()

    def data_received(self, data: bytes) -> None:
        """Decode every complete frame in ``data`` and dispatch it; a framing error is answered
        (request id 0) and closes only this connection."""
        self.last_seen = self._clock()
        decoder = self._decoder
        size = len(data)
        self._out = []
        try:
            while True:
                # before the handshake completes, one frame at a time: it raises the size
                # limit for the frames behind it
                established = self.established
                try:
                    frames = decoder.feed(data, 0 if established else 1)
                except ProtocolError as exc:
                    self._fail(exc)
                    return
                data = b""
                for frame in frames:
                    if frame.kind == _RESPONSE:
                        continue  # answers to our one-way pushes are not expected
                    self._dispatch(frame.kind, frame.code, frame.request_id, frame.body)
                    if self.closed or self._close_after_reply:
                        return
                if established or not frames:
                    break
            if self._joined:
                self._run_joined()
            held = decoder.buffered
            if held != self._held:  # no call when nothing changed (most reads)
                self._account_buffer(held)
        finally:
            out, self._out = self._out, None
            if out and self._transport is not None and not self.closed:
                self._transport.write(out[0] if len(out) == 1 else b"".join(out))
            if self._close_after_reply:
                self.close()
        if size >= YIELD_AFTER_BYTES and not self.closed:
            self._yield_turn()

    def _over_budget(self, held: int) -> None:
        """Refuse the partly received request (TOO_MANY_REQUESTS) and skip the rest of its
        bytes."""
        budget = self._budget
        header = self._decoder.abandon_partial()
        if header is None:  # not even a header yet (under 12 bytes): not worth refusing
            budget.used += held
            self._held = held
            return
        self._held = 0
        self.bad_input_log.warning(
            "buffer-budget",
            "refused a %d-byte request from %s: frames being received hold %d bytes (limit %d)",
            header.body_size,
            self.remote or "?",
            budget.used,
            budget.limit,
        )
        if header.kind == FrameKind.REQUEST:
            self._respond_error(
                header.request_id,
                Code.TOO_MANY_REQUESTS,
                f"the broker is receiving too many large requests at once ({budget.used} of "
                f"{budget.limit} bytes buffered); back off and retry",
            )

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, kind: int, code: int, request_id: int, body: bytes) -> None:
        oneway = kind == _ONEWAY
        if not self._greeted and code != _HELLO:  # the field: no property call per frame
            self._fail(LocalProtocolError("the first frame must be HELLO"), request_id)
            return
        if not self.established:
            if code not in _BEFORE_AUTHENTICATION:
                count_failure("native", "unauthenticated")
                if not oneway:
                    self._respond_error(
                        request_id,
                        Code.NO_PERMISSION,
                        "this server requires authentication: configure an access key and "
                        "secret key (docs/security.md)",
                    )
                return
            self._dispatch_handshake(kind, code, request_id, body)
            return
        if self.permitted is not None and code not in self.permitted:
            count_failure("native", "forbidden")
            if not oneway:
                self._respond_error(
                    request_id,
                    Code.NO_PERMISSION,
                    f"{self.user} may not ask for operation {_name(code, _REQUEST_NAMES)} "
                    '(docs/security.md, "Who may do what, per port")',
                )
            return
        credential = self.credential  # two reads and a comparison unless the users changed
        if (
            credential is not None
            and credential.seen != credential.store.generation
            and not credential.holds()
        ):
            count_failure("native", "unauthenticated")
            self._fail(NoPermissionError(credential.why()), request_id)
            return
        if self._joined and code != self._joined[0][0]:
            self._run_joined()  # what arrived first takes effect first
        handler = self._handlers.get(code)
        request_type = REQUESTS.get(code)
        if handler is None or request_type is None:
            if not oneway:
                self._respond_error(
                    request_id, Code.REQUEST_CODE_NOT_SUPPORTED, f"unsupported operation {code}"
                )
            return
        started = time.perf_counter()
        try:
            decoder = DECODERS.get(request_type)  # decode_body's own, without its frame
            if decoder is None:  # the first of its type: decode_body makes it
                request = decode_body(body, request_type)
            else:
                try:
                    request = decoder.decode(body)
                except Exception:  # decode_body names what is wrong (LocalProtocolError)
                    request = decode_body(body, request_type)
            result = handler(self, request)
        except Exception as exc:
            self._complete(code, request_id, oneway, started, exc)
            return
        if type(result) is Joined:
            if self._joined and result.run is not self._join_run:
                self._run_joined()
            self._join_run = result.run
            self._joined.append((code, request_id, oneway, started, result.item))
            if len(self._joined) >= JOIN_LIMIT:
                self._run_joined()
            return
        self._complete(code, request_id, oneway, started, result)

    def _dispatch_handshake(self, kind: int, code: int, request_id: int, body: bytes) -> None:
        """HELLO or AUTHENTICATE before the handshake is complete: answered inline, then the
        connection may become established."""
        oneway = kind == FrameKind.ONEWAY
        handler = self._handlers.get(code)
        if handler is None:  # a port without authentication has no AUTHENTICATE
            if not oneway:
                self._respond_error(
                    request_id, Code.REQUEST_CODE_NOT_SUPPORTED, f"unsupported operation {code}"
                )
            return
        started = time.perf_counter()
        result: object
        try:
            result = handler(self, decode_body(body, REQUESTS[code]))
        except Exception as exc:
            result = exc
        self._complete(code, request_id, oneway, started, result)
        self._check_established()

    def _answer_joined(self, joined: list[Any], results: Sequence[object]) -> None:
        if len(joined) == 1 and len(results) == 1:  # a lone request: no zip, no unpacking loop
            code, request_id, oneway, started, _ = joined[0]
            self._complete(code, request_id, oneway, started, results[0])
            return
        for (code, request_id, oneway, started, _), result in zip(joined, results, strict=True):
            self._complete(code, request_id, oneway, started, result)

    def _complete(
        self, code: int, request_id: int, oneway: bool, started: float, result: object
    ) -> None:
        """Answer a handler's result: a response body (or None), an error it raised, or an
        awaitable finished by a task so it never holds up the requests behind it."""
        if result is None or isinstance(result, msgspec.Struct):
            latency = self._latency
            if latency is not None:  # _observe's work without its frame (every answer, served)
                key = _LABELS.get((code, _SUCCESS)) or _labels(code, _SUCCESS)
                latency.observe_key(key, time.perf_counter() - started)
            if not oneway:
                self._respond(request_id, _SUCCESS, result)
        elif isinstance(result, PocketMQError):
            self._observe(code, _wire_code(result), started)
            if not oneway:
                self._respond_exception(request_id, result)
        elif isinstance(result, Exception):
            self._observe(code, Code.SYSTEM_ERROR, started)
            self._internal_error(code, result)
            if not oneway:
                self._respond_error(request_id, Code.SYSTEM_ERROR, f"internal error: {result}")
        elif not inspect.isawaitable(result):
            self._complete(code, request_id, oneway, started, TypeError(f"handler gave {result!r}"))
        else:
            pending = cast("Awaitable[msgspec.Struct | None]", result)
            task = asyncio.ensure_future(self._finish(code, request_id, oneway, pending, started))
            self.inflight += 1
            self._tasks.add(task)
            if code in _LONG_POLLS:
                self._polls[request_id] = task
                task.add_done_callback(functools.partial(self._poll_done, request_id))
            task.add_done_callback(self._task_done)

    def _observe(self, code: int, response: int, started: float) -> None:
        if self._latency is not None:
            self._latency.observe_key(_labels(code, response), time.perf_counter() - started)

    async def _finish(
        self,
        code: int,
        request_id: int,
        oneway: bool,
        pending: Awaitable[msgspec.Struct | None],
        started: float,
    ) -> None:
        try:
            result = await pending
        except PocketMQError as exc:
            self._observe(code, _wire_code(exc), started)
            if not oneway:
                self._respond_exception(request_id, exc)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._observe(code, Code.SYSTEM_ERROR, started)
            self._internal_error(code, exc)
            if not oneway:
                self._respond_error(request_id, Code.SYSTEM_ERROR, f"internal error: {exc}")
            return
        self._observe(code, Code.SUCCESS, started)
        if not oneway:
            self._respond(request_id, Code.SUCCESS, result)

    def _internal_error(self, code: int, exc: Exception) -> None:
        """A handler bug: its traceback, but once per operation per interval, not per frame."""
        self.bad_input_log.error(
            f"internal-{code}", "handler for operation %s failed", code, exc_info=exc
        )

    # -- writing --------------------------------------------------------------------------

    def _respond(self, request_id: int, code: int, body: msgspec.Struct | None) -> None:
        payload = encode_body_fast(body) if body is not None else b""
        if len(payload) > MAX_FRAME_BODY:
            # handlers page what grows with the data; should one still overflow, this request
            # fails alone, instead of the connection and every request pipelined on it
            self.bad_input_log.warning(
                "response-too-large",
                "a response of %d bytes to %s exceeds the frame limit",
                len(payload),
                self.remote or "?",
            )
            code = Code.MESSAGE_TOO_LARGE
            payload = encode_body(
                ErrorBody(
                    f"the response would be {len(payload)} bytes, over the {MAX_FRAME_BODY}-byte "
                    "frame limit: ask for fewer results"
                )
            )
        frame = encode_frame(_RESPONSE, code, request_id, payload)
        out = self._out
        if out is not None and not self.closed and self._transport is not None:
            out.append(frame)  # an answer to the read being served: what _write does, inline
        else:
            self._write(frame)

    def _respond_error(self, request_id: int, code: int, remark: str) -> None:
        self._respond(request_id, code, ErrorBody(remark))

    def _respond_exception(self, request_id: int, exc: PocketMQError) -> None:
        # an InvalidArgumentError of the shared validation is answered MESSAGE_ILLEGAL
        self._respond_error(request_id, _wire_code(exc), str(exc))

    def fail(self, exc: BrokerError | ProtocolError) -> None:
        """Tell the client why the server closes this connection (request id 0), and close it."""
        self._fail(exc)

    def _fail(self, exc: BrokerError | ProtocolError, request_id: int = 0) -> None:
        """Answer a connection-level error and close this connection (only this one)."""
        self.bad_input_log.warning(
            f"closing-{exc.wire_code}", "closing connection from %s: %s", self.remote or "?", exc
        )
        frame = encode_frame(
            FrameKind.RESPONSE, exc.wire_code, request_id, encode_body(ErrorBody(str(exc)))
        )
        pending = [*(self._out or []), *self._later, frame]
        self._out = None
        self._later = []
        if self._transport is not None and not self.closed:
            self._transport.write(b"".join(pending))  # close() still sends what was written
            self._transport.close()
        self.closed = True
        self._release_buffer()

    def expire(self, now: float) -> None:
        """Close the connection if it has overstayed: no HELLO within ``hello_timeout``, or
        nothing received for ``idle_timeout`` with no request still being served."""
        if self.closed:
            return
        limits = self.limits
        if not self.established:
            if now - self.opened_at >= limits.hello_timeout:
                what = "not authenticated" if self._greeted else "no HELLO"
                self._fail(LocalProtocolError(f"{what} within {limits.hello_timeout:g} s"))
        elif self.inflight == 0 and now - self.last_seen >= limits.idle_timeout:
            log.debug("closing %s: idle for %.0f s", self.remote or "?", now - self.last_seen)
            self.close()

    def push(self, code: RequestCode, body: msgspec.Struct) -> None:
        """Send a one-way request to the client (notifications, transaction checks)."""
        request_id = self._next_request_id
        self._next_request_id = (request_id + 1) & 0xFFFFFFFF or 1
        self._write(encode_frame(FrameKind.ONEWAY, code, request_id, encode_body(body)))
