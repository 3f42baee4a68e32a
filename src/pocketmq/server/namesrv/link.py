"""The broker's own link to a name server: register every 30 s, ask for routes.

A deliberately small request/response client (the server layer does not use the SDK): one
connection, reopened when it breaks; a failed registration is retried on the next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from typing import TypeVar

import msgspec

from pocketmq.errors import BrokerConnectionError, Code, error_from_code
from pocketmq.protocol import PROTOCOL_VERSION, FrameDecoder, FrameKind, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.frames import encode_frame

__all__ = ["NameServerLink"]

log = logging.getLogger("pocketmq.server")

T = TypeVar("T")


class NameServerLink:
    """The broker's one connection to its name server (module doc): registrations and route lookups,
    one request at a time."""

    def __init__(
        self,
        address: str,
        client_id: str,
        timeout: float = 3.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._tls = tls
        self.address = address
        self._host = host.strip("[]")
        self._port = int(port)
        self._client_id = client_id
        self._timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._tls
        )
        self._decoder = FrameDecoder()
        await self._call_locked(
            RequestCode.HELLO,
            w.HelloRequest(PROTOCOL_VERSION, self._client_id, "broker"),
            w.HelloResponse,
        )

    async def call(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        """Every request this link makes (registration, routes) is idempotent: one that fails
        on a reused connection — the name server may have closed it as idle — is sent again
        on a new one."""
        async with self._lock:
            reused = self._writer is not None
            try:
                return await self._call_once(code, body, reply)
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                await self._drop()
                if not reused or isinstance(exc, TimeoutError):
                    raise self._unreachable(exc) from exc
            try:
                return await self._call_once(code, body, reply)
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                await self._drop()
                raise self._unreachable(exc) from exc

    async def _call_once(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        # asyncio.timeout, not wait_for: wait_for (Python < 3.12) can swallow the cancellation
        # of a task stopped at the moment the answer arrives, and the task would live on
        if self._writer is None:
            async with asyncio.timeout(self._timeout):
                await self._connect()
        async with asyncio.timeout(self._timeout):
            return await self._call_locked(code, body, reply)

    def _unreachable(self, exc: BaseException) -> BrokerConnectionError:
        return BrokerConnectionError(
            f"name server {self.address} unreachable: {exc}", address=self.address
        )

    async def _call_locked(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        assert self._reader is not None and self._writer is not None
        request_id = next(self._ids)
        self._writer.write(encode_frame(FrameKind.REQUEST, code, request_id, w.encode_body(body)))
        await self._writer.drain()
        while True:
            data = await self._reader.read(65536)
            if not data:
                raise asyncio.IncompleteReadError(b"", None)
            for frame in self._decoder.feed(data):
                if frame.kind == FrameKind.RESPONSE and frame.request_id == request_id:
                    if frame.code != Code.SUCCESS:
                        raise error_from_code(
                            frame.code, w.decode_body(frame.body, w.ErrorBody).remark
                        )
                    return w.decode_body(frame.body, reply)

    async def _drop(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def close(self) -> None:
        """Close the connection (shutdown)."""
        async with self._lock:
            await self._drop()
