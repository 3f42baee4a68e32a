"""One TCP connection speaking the native protocol, server side.

An ``asyncio.Protocol`` rather than streams: frames are decoded straight from ``data_received``,
fast handlers answer inline and every response produced by one read goes out in one write. Slow
handlers (long polls, sync-flushed sends) run as tasks so they never hold up the requests behind
them. A framing error is answered and closes only this connection.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from pocketmq.errors import BrokerError, Code, PocketMQError, ProtocolError
from pocketmq.protocol import FrameDecoder, FrameKind, RequestCode, encode_body, encode_frame
from pocketmq.protocol.structs import REQUESTS, ErrorBody, decode_body

__all__ = ["Handler", "HandlerTable", "ServerConnection"]

log = logging.getLogger("pocketmq.server")

Handler = Callable[
    ["ServerConnection", Any], "msgspec.Struct | Awaitable[msgspec.Struct | None] | None"
]
HandlerTable = dict[int, Handler]

_HIGH_WATER = 4 * 1024 * 1024


class ServerConnection(asyncio.Protocol):
    def __init__(
        self,
        handlers: HandlerTable,
        on_close: Callable[[ServerConnection], None],
        tasks: set[asyncio.Task[None]],
    ) -> None:
        self._handlers = handlers
        self._on_close = on_close
        self._tasks = tasks
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] | None = None
        self._later: list[bytes] = []
        self._paused = False
        self.greeted = False
        self.client_id = ""
        self.remote = ""
        self.closed = False
        self.state: dict[str, Any] = {}
        self._next_request_id = 1

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            host = peer[0]
            self.remote = f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_close(self)

    def pause_writing(self) -> None:
        self._paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._transport is not None and not self.closed:
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        self._out = []
        try:
            for frame in frames:
                if frame.kind == FrameKind.RESPONSE:
                    continue  # answers to our one-way pushes are not expected
                self._dispatch(frame.kind, frame.code, frame.request_id, frame.body)
                if self.closed:
                    return
        finally:
            out, self._out = self._out, None
            if out and self._transport is not None and not self.closed:
                self._transport.write(b"".join(out))

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, kind: int, code: int, request_id: int, body: bytes) -> None:
        oneway = kind == FrameKind.ONEWAY
        if not self.greeted and code != RequestCode.HELLO:
            self._fail(ProtocolError("the first frame must be HELLO"), request_id)
            return
        handler = self._handlers.get(code)
        request_type = REQUESTS.get(code)
        if handler is None or request_type is None:
            if not oneway:
                self._respond_error(
                    request_id, Code.REQUEST_CODE_NOT_SUPPORTED, f"unsupported operation {code}"
                )
            return
        try:
            request = decode_body(body, request_type)
            result = handler(self, request)
        except PocketMQError as exc:
            if not oneway:
                self._respond_exception(request_id, exc)
            return
        except Exception as exc:
            log.exception("handler for operation %s failed", code)
            if not oneway:
                self._respond_error(request_id, Code.SYSTEM_ERROR, f"internal error: {exc}")
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish(request_id, oneway, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif not oneway:
            self._respond(request_id, Code.SUCCESS, result)

    async def _finish(
        self, request_id: int, oneway: bool, pending: Awaitable[msgspec.Struct | None]
    ) -> None:
        try:
            result = await pending
        except PocketMQError as exc:
            if not oneway:
                self._respond_exception(request_id, exc)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("async handler failed")
            if not oneway:
                self._respond_error(request_id, Code.SYSTEM_ERROR, f"internal error: {exc}")
            return
        if not oneway:
            self._respond(request_id, Code.SUCCESS, result)

    # -- writing --------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        if self.closed or self._transport is None:
            return
        if self._out is not None:
            self._out.append(frame)
            return
        # answers finishing in the same loop iteration leave in one write
        if not self._later:
            asyncio.get_running_loop().call_soon(self._flush_later)
        self._later.append(frame)

    def _flush_later(self) -> None:
        later, self._later = self._later, []
        if later and self._transport is not None and not self.closed:
            self._transport.write(b"".join(later) if len(later) > 1 else later[0])

    def _respond(self, request_id: int, code: int, body: msgspec.Struct | None) -> None:
        payload = encode_body(body) if body is not None else b""
        self._write(encode_frame(FrameKind.RESPONSE, code, request_id, payload))

    def _respond_error(self, request_id: int, code: int, remark: str) -> None:
        self._respond(request_id, code, ErrorBody(remark))

    def _respond_exception(self, request_id: int, exc: PocketMQError) -> None:
        if isinstance(exc, BrokerError):
            self._respond_error(request_id, exc.wire_code, str(exc))
        else:  # client-side classes raised by shared validation (e.g. InvalidArgumentError)
            self._respond_error(request_id, Code.MESSAGE_ILLEGAL, str(exc))

    def _fail(self, exc: ProtocolError, request_id: int = 0) -> None:
        """Answer a framing error and close this connection (only this one)."""
        log.warning("closing connection from %s: %s", self.remote or "?", exc)
        frame = encode_frame(
            FrameKind.RESPONSE, Code.PROTOCOL_ERROR, request_id, encode_body(ErrorBody(str(exc)))
        )
        pending = [*(self._out or []), *self._later, frame]
        self._out = None
        self._later = []
        if self._transport is not None and not self.closed:
            self._transport.write(b"".join(pending))  # close() still sends what was written
            self._transport.close()
        self.closed = True

    def push(self, code: RequestCode, body: msgspec.Struct) -> None:
        """Send a one-way request to the client (notifications, transaction checks)."""
        request_id = self._next_request_id
        self._next_request_id = (request_id + 1) & 0xFFFFFFFF or 1
        self._write(encode_frame(FrameKind.ONEWAY, code, request_id, encode_body(body)))

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()

    @property
    def backlogged(self) -> bool:
        transport = self._transport
        return transport is not None and transport.get_write_buffer_size() > _HIGH_WATER
