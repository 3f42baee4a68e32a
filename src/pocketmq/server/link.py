"""A server's own links to other components' native ports: a broker's to its name server
(registrations, routes) and to the other brokers of its cluster (the cluster view's figures).

A deliberately small request/response client (the server layer does not use the SDK): one
connection, reopened when it breaks, each call bounded by a timeout. With the cluster key it
signs in as a member of the cluster (``cluster/inner``) and checks that the other side proves it
holds the key too (docs/security.md, "Trust inside the cluster"): one that cannot is not
believed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from typing import TypeVar

import msgspec

from pocketmq.errors import BrokerConnectionError, BrokerError, Code, ProtocolError, error_from_code
from pocketmq.protocol import PROTOCOL_VERSION, FrameDecoder, FrameKind, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import ClientHandshake, normalize_address
from pocketmq.protocol.frames import encode_frame
from pocketmq.server.auth.cluster import CLUSTER_USER, ClusterKeyFile

__all__ = ["NativeLink"]

log = logging.getLogger("pocketmq.server")

T = TypeVar("T")


class NativeLink:
    """One connection from this server to another component's native port (module doc), one
    request at a time; ``what`` names the other side in errors ("name server", "broker")."""

    what = "server"

    def __init__(
        self,
        address: str,
        client_id: str,
        timeout: float = 3.0,
        tls: ssl.SSLContext | None = None,
        cluster_key: ClusterKeyFile | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._tls = tls
        self._cluster_key = cluster_key
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
        secret = self._cluster_key.key().current if self._cluster_key is not None else ""
        handshake = ClientHandshake(
            self._client_id,
            CLUSTER_USER if secret else "",
            secret,
            missing_credentials="give this broker the cluster's key (--cluster-key, "
            'docs/security.md "Trust inside the cluster")',
        )
        hello = await self._call_locked(
            RequestCode.HELLO, handshake.hello("broker", PROTOCOL_VERSION), w.HelloResponse
        )
        answer = handshake.authenticate(hello, self._peer(), self.address)
        if answer is not None:
            handshake.check(
                await self._call_locked(RequestCode.AUTHENTICATE, answer, w.AuthenticateResponse)
            )

    def _peer(self) -> str:
        peer = self._writer.get_extra_info("peername") if self._writer is not None else None
        if isinstance(peer, tuple) and len(peer) >= 2:
            return normalize_address(str(peer[0]), int(peer[1]))
        return ""

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
            try:
                async with asyncio.timeout(self._timeout):
                    await self._connect()
            except (BrokerError, ProtocolError) as exc:  # a handshake refused: no use
                await self._drop()
                raise BrokerConnectionError(
                    f"{self.what} {self.address} refused this broker: {exc}", address=self.address
                ) from exc
            except BaseException:
                await self._drop()  # never a half-open, unauthenticated connection left
                raise
        async with asyncio.timeout(self._timeout):
            return await self._call_locked(code, body, reply)

    def _unreachable(self, exc: BaseException) -> BrokerConnectionError:
        return BrokerConnectionError(
            f"{self.what} {self.address} unreachable: {_reason(exc)}", address=self.address
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


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed"
    return str(exc) or type(exc).__name__
