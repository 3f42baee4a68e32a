"""One TCP connection speaking RocketMQ's remoting protocol, server side (docs/remoting.md).

It is handed over by the port's sniffer (``server/listening.py``) once the client's first bytes
named the protocol, and is built like the native connection next door: an ``asyncio.Protocol``
decoding frames straight from ``data_received`` (:class:`RemotingFrameDecoder`), fast handlers
answering inline with every response of one read leaving in one write, slow ones (long polls,
sync-flushed sends) running as tasks so they never hold up the requests behind them.

Requests are dispatched by code through a handler table; a response carries its request's
``opaque`` and header serialization; one-way requests are never answered; an unknown code is
answered ``REQUEST_CODE_NOT_SUPPORTED`` with RocketMQ's remark. Requests the server sends on the
connection (check-backs, consumer-group changes) have their own opaque counter
(:mod:`~pocketmq.server.remoting.outbound`).

What a connection may hold is bounded as on the native port (docs/remoting.md, "Limits and
errors"; the port's ``ConnectionLimits``): the bytes it buffers for frames still arriving count
against the port's budget — past it, that request is answered ``SYSTEM_BUSY`` and its body
skipped, the connection stays; a frame that does not decode closes only this connection, after
the requests before it were served. On a port with authentication the first correctly signed
request is what the native ``HELLO``/``AUTHENTICATE`` handshake is: until it arrives the
connection counts as one in its handshake (the port's cap on those, ``hello_timeout`` to send
it), and frames above ``max_frame_before_hello`` are read past their header only when it names a
known user and carries a signature. A connection whose first signed request is refused is closed
after the answer, as a failed native login is.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeAlias, cast

from pocketmq.errors import BrokerError, LocalProtocolError, PocketMQError, ProtocolError
from pocketmq.protocol.remoting.codes import (
    VERSION_V4_9_4,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from pocketmq.protocol.remoting.command import RemotingCommand, encode_command, response_to
from pocketmq.protocol.remoting.frames import MAX_FRAME, RemotingFrameDecoder
from pocketmq.server.listening import PortShare
from pocketmq.server.pacing import YIELD_AFTER_BYTES
from pocketmq.server.remoting.outbound import Outbound
from pocketmq.server.remoting.outcomes import JOIN_LIMIT, Joined, Reply, response_code
from pocketmq.server.remoting.signatures import SignatureCheck
from pocketmq.server.serving import ServedConnection

__all__ = ["RemotingConnection", "RemotingHandler", "RemotingHandlerTable"]

log = logging.getLogger("pocketmq.server.remoting")

RemotingHandler: TypeAlias = Callable[
    ["RemotingConnection", RemotingCommand], "Reply | Awaitable[Reply | None] | Joined | None"
]
"""A request's handler: the connection and the request in, a :class:`Reply` (None: ``SUCCESS``
with nothing), an awaitable of one, or a :class:`Joined` (done with the read's other requests of
its kind) out; a pocketmq error it raises is answered with its code."""
RemotingHandlerTable: TypeAlias = dict[int, RemotingHandler]

_LONG_POLLS: Final = frozenset({RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE})
_REQUEST_NAMES: Final = {code.value: code.name for code in RequestCode}
_RESPONSE_NAMES: Final = {code.value: code.name for code in ResponseCode}
_LABELS: dict[tuple[int, int], tuple[str, str, str]] = {}


def _labels(request: int, response: int) -> tuple[str, str, str]:
    key = _LABELS.get((request, response))
    if key is None:
        key = _LABELS[(request, response)] = (
            "remoting",
            _REQUEST_NAMES.get(request) or str(request),
            _RESPONSE_NAMES.get(response) or str(response),
        )
    return key


class RemotingConnection(ServedConnection):
    """One remoting connection (module doc). ``user`` is the access key that signed the request
    being dispatched (authentication on; "" otherwise): a handler reads it before its first
    ``await``. ``state`` is the handlers' own per-connection space (client ids, groups)."""

    def __init__(
        self,
        handlers: RemotingHandlerTable,
        share: PortShare,
        *,
        signatures: SignatureCheck | None = None,
        opened_at: float | None = None,
        on_close: Callable[[RemotingConnection], None] | None = None,
    ) -> None:
        super().__init__(share.clock, share.budget, share.tasks)
        self._handlers = handlers
        self._share = share
        self._signatures = signatures
        self._on_close = on_close
        self.limits = share.limits
        self.bad_input_log = share.log
        self._decoder = RemotingFrameDecoder(MAX_FRAME)
        self._large_first = False  # a large first frame admitted by its header (module doc)
        self.outbound = Outbound(self._write)
        self.established = signatures is None  # no handshake without authentication
        self.user = ""
        self.language = ""  # of the client's latest request (JAVA, NODE_JS, ...)
        self.version = 0  # its MQVersion ordinal
        self.serialize_type: int = SerializeType.JSON  # what the server's requests use
        self.opened_at = self.last_seen = share.clock() if opened_at is None else opened_at

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport and the peer; without authentication there is no handshake
        to wait for."""
        self._note_transport(transport)
        if self.established:
            self._share.on_established(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Give back the budget, stop the long polls, fail the server's waiting requests and
        leave the books."""
        self._drop()
        self.outbound.close(f"the connection from {self.remote or '?'} closed")
        if self._on_close is not None:
            self._on_close(self)
        self._share.on_close(self)

    def data_received(self, data: bytes) -> None:
        """Decode every complete frame in ``data`` and dispatch it; a frame that does not decode
        closes this connection once the frames before it are answered."""
        self.last_seen = self._clock()
        self._out = []
        try:
            try:
                commands = self._decoder.feed(data)
            except ProtocolError as exc:
                self._fail(exc)
                return
            for command in commands:
                self._dispatch(command)
                if self.closed or self._close_after_reply:
                    return
            if commands:
                try:  # a bad frame behind these surfaces now, once they are answered
                    self._decoder.feed(b"")
                except ProtocolError as exc:
                    self._fail(exc)
                    return
            if self._decoder.buffered and not self._guard_first_frame():
                return
            self._account_buffer(self._decoder.buffered)
        finally:
            if self._joined and not self.closed:
                self._run_joined()
            out, self._out = self._out, None
            if out and self._transport is not None and not self.closed:
                self._transport.write(b"".join(out))
            if self._close_after_reply:
                self.close()
        if len(data) >= YIELD_AFTER_BYTES and not self.closed:
            self._yield_turn()

    # -- limits ---------------------------------------------------------------------------

    def _guard_first_frame(self) -> bool:
        """Before the first signed request: a frame larger than ``max_frame_before_hello`` is
        read past its header only if the header names a known user and a signature; False when
        the connection was refused (module doc)."""
        if self.established or self._large_first or self._signatures is None:
            return True
        if self._decoder.buffered <= self.limits.max_frame_before_hello:
            return True
        try:
            partial = self._decoder.partial_header()
        except ProtocolError as exc:
            self._fail(exc)
            return False
        if partial is None:  # a header this long is no client's first request
            self._fail(
                LocalProtocolError(
                    f"more than {self.limits.max_frame_before_hello} bytes before a header "
                    "ended, before any signed request"
                )
            )
            return False
        if self._signatures.may_send_large(partial.command, self.peer_host):
            self._large_first = True
            return True
        self._decoder.abandon_partial()
        self._refuse_first(
            partial.command,
            f"a request of {partial.body_size} bytes before any signed one needs the "
            "signature of a known user",
        )
        return False

    def _refuse_first(self, command: RemotingCommand, remark: str) -> None:
        self.bad_input_log.warning(
            "remoting-unauthenticated",
            "refused a remoting connection from %s: %s",
            self.remote or "?",
            remark,
        )
        if not command.is_oneway and not command.is_response:
            self._respond(command, Reply(ResponseCode.NO_PERMISSION, remark=remark))
        self._close_after_reply = True

    def _over_budget(self, held: int) -> None:
        """Answer the partly received request ``SYSTEM_BUSY`` and skip the rest of its
        bytes."""
        budget = self._budget
        try:
            partial = self._decoder.abandon_partial()
        except ProtocolError as exc:
            self._fail(exc)
            return
        if partial is None:  # its header is not in yet: bounded by the decoder's max_header
            budget.used += held
            self._held = held
            return
        self._held = 0
        self.bad_input_log.warning(
            "remoting-buffer-budget",
            "refused a %d-byte remoting request from %s: frames being received hold %d bytes "
            "(limit %d)",
            partial.body_size,
            self.remote or "?",
            budget.used,
            budget.limit,
        )
        command = partial.command
        if not command.is_oneway and not command.is_response:
            self._respond(
                command,
                Reply(
                    ResponseCode.SYSTEM_BUSY,
                    remark=f"the server is receiving too many large requests at once "
                    f"({budget.used} of {budget.limit} bytes buffered); back off and retry",
                ),
            )

    def expire(self, now: float) -> None:
        """Close the connection if it overstayed: no signed request within ``hello_timeout``
        (authentication on), or nothing received for ``idle_timeout`` with no request being
        served and no answer awaited."""
        if self.closed:
            return
        limits = self.limits
        if not self.established:
            if now - self.opened_at >= limits.hello_timeout:
                self.bad_input_log.warning(
                    "remoting-no-signed-request",
                    "closing remoting connection from %s: no signed request within %g s",
                    self.remote or "?",
                    limits.hello_timeout,
                )
                self.close()
        elif (
            self.inflight == 0
            and self.outbound.waiting == 0
            and now - self.last_seen >= limits.idle_timeout
        ):
            log.debug("closing %s: idle for %.0f s", self.remote or "?", now - self.last_seen)
            self.close()

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, command: RemotingCommand) -> None:
        if command.is_response:
            if not self.outbound.resolve(command):
                log.debug("a response nobody waits for (opaque %d)", command.opaque)
            return
        self.language, self.version = command.language, command.version
        self.serialize_type = command.serialize_type
        handler = self._handlers.get(command.code)
        if handler is None:  # as RocketMQ: before any check, whoever asks
            if not command.is_oneway:
                remark = f" request type {command.code} not supported"
                self._respond(
                    command, Reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=remark)
                )
            return
        started = time.perf_counter()
        if self._signatures is not None and not self._signed(command, started):
            return
        if self._joined and command.code != self._joined[0][0].code:
            self._run_joined()  # what arrived first takes effect first
        try:
            result = handler(self, command)
        except Exception as exc:
            self._complete(command, started, exc)
            return
        if type(result) is Joined:
            if self._joined and result.run is not self._join_run:
                self._run_joined()
            self._join_run = result.run
            self._joined.append((command, started, result.item))
            if len(self._joined) >= JOIN_LIMIT:
                self._run_joined()
            return
        self._complete(command, started, result)

    def _answer_joined(self, joined: list[Any], results: Sequence[object]) -> None:
        for (command, started, _), result in zip(joined, results, strict=True):
            self._complete(command, started, result)

    def _signed(self, command: RemotingCommand, started: float) -> bool:
        """Check the request's signature (authentication on); a refusal is answered, and closes
        a connection that never sent a signed request."""
        assert self._signatures is not None
        try:
            self.user = self._signatures.signer(command, self.peer_host)
        except PocketMQError as exc:
            self._observe(command.code, response_code(exc), started)
            if self.established:
                self._respond(command, Reply(response_code(exc), remark=str(exc)))
            else:
                self._refuse_first(command, str(exc))
            return False
        if not self.established:
            self.established = True
            self._share.on_established(self)
        return True

    def _complete(self, command: RemotingCommand, started: float, result: object) -> None:
        """Answer a handler's result: a reply (or None), an error it raised, or an awaitable
        finished by a task."""
        if result is None or isinstance(result, Reply):
            reply = result or Reply()
            self._observe(command.code, reply.code, started)
            self._respond(command, reply)
        elif isinstance(result, PocketMQError):
            self._observe(command.code, response_code(result), started)
            self._respond(command, Reply(response_code(result), remark=str(result)))
        elif isinstance(result, Exception):
            self._observe(command.code, ResponseCode.SYSTEM_ERROR, started)
            self._internal_error(command.code, result)
            self._respond(
                command, Reply(ResponseCode.SYSTEM_ERROR, remark=f"internal error: {result}")
            )
        elif not inspect.isawaitable(result):
            self._complete(command, started, TypeError(f"handler gave {result!r}"))
        else:
            pending = cast("Awaitable[Reply | None]", result)
            task = asyncio.ensure_future(self._finish(command, pending, started))
            self.inflight += 1
            self._tasks.add(task)
            if command.code in _LONG_POLLS:
                self._polls[command.opaque] = task
                task.add_done_callback(functools.partial(self._poll_done, command.opaque))
            task.add_done_callback(self._task_done)

    async def _finish(
        self, command: RemotingCommand, pending: Awaitable[Reply | None], started: float
    ) -> None:
        try:
            result: object = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = exc
        self._complete(command, started, result)

    def _observe(self, code: int, response: int, started: float) -> None:
        self._share.latency.observe_key(_labels(code, response), time.perf_counter() - started)

    def _internal_error(self, code: int, exc: Exception) -> None:
        """A handler bug: its traceback, once per request code per interval."""
        self.bad_input_log.error(
            f"remoting-internal-{code}", "remoting handler for code %s failed", code, exc_info=exc
        )

    # -- writing --------------------------------------------------------------------------

    def _respond(self, request: RemotingCommand, reply: Reply) -> None:
        if request.is_oneway:
            return
        response = response_to(
            request, reply.code, reply.ext_fields, reply.body, reply.remark, VERSION_V4_9_4
        )
        try:
            frame = encode_command(response)
            if len(frame) > MAX_FRAME:
                raise LocalProtocolError(
                    f"the response would be {len(frame)} bytes, over {MAX_FRAME}"
                )
        except ProtocolError as exc:  # this request fails alone, not the connection
            self.bad_input_log.warning(
                "remoting-response", "cannot answer %s: %s", self.remote or "?", exc
            )
            fallback = Reply(ResponseCode.SYSTEM_ERROR, remark=f"cannot encode the answer: {exc}")
            frame = encode_command(
                response_to(request, fallback.code, None, b"", fallback.remark, VERSION_V4_9_4)
            )
        self._write(frame)

    # -- the server's requests ------------------------------------------------------------

    def push(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"") -> None:
        """Send the client a one-way request (``NOTIFY_CONSUMER_IDS_CHANGED``,
        ``CHECK_TRANSACTION_STATE``) in the header serialization it speaks;
        :class:`~pocketmq.errors.BrokerConnectionError` once the connection is gone."""
        self.outbound.push(code, ext_fields or {}, body, self.serialize_type)

    async def request(
        self,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float = 3.0,
    ) -> RemotingCommand:
        """Send the client a request and wait for its response (``GET_CONSUMER_RUNNING_INFO``,
        ``CONSUME_MESSAGE_DIRECTLY``); see :meth:`Outbound.request` for its errors."""
        return await self.outbound.request(
            code, ext_fields or {}, body, self.serialize_type, timeout
        )

    # -- closing --------------------------------------------------------------------------

    def fail(self, exc: BrokerError | ProtocolError) -> None:
        """Close to make room (the listener's caps): no request to answer, so the client
        only sees the close."""
        self._fail(exc)

    def _fail(self, exc: BrokerError | ProtocolError) -> None:
        self.bad_input_log.warning(
            f"remoting-closing-{exc.wire_code}",
            "closing remoting connection from %s: %s",
            self.remote or "?",
            exc,
        )
        pending = [*(self._out or []), *self._later]
        self._out = None
        self._later = []
        if self._transport is not None and not self.closed:
            if pending:
                self._transport.write(b"".join(pending))  # close() still sends what was written
            self._transport.close()
        self.closed = True
        self._release_buffer()
