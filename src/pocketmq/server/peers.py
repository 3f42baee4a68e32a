"""A broker's links to the other brokers of its cluster, for the cluster view
(docs/operations.md, "Cluster view"): ``BROKER_OVERVIEW`` over their native port, authenticated
like any client when they ask for it.

A deliberately small request/response client (the server layer does not use the SDK): one
connection per peer, opened on first use, reopened after a failure, each call bounded by a short
timeout so one broker that does not answer never holds up the page that asked.

**Credentials come from one place**, :func:`peer_credentials`. Until the cluster's inner
identity is wired (issue 28: the cluster key, ``CLUSTER_USER``, and the mutual handshake of
``protocol/auth.py``), they are a user's keys from the broker's environment
(``POCKETMQ_ACCESS_KEY``/``POCKETMQ_SECRET_KEY``: a super user, or under ``--authorization`` a
user allowed ``Get`` on the cluster), or none on a cluster without authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from pocketmq.errors import BrokerConnectionError, Code, NoPermissionError, error_from_code
from pocketmq.protocol import PROTOCOL_VERSION, FrameDecoder, FrameKind, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import challenge_signature
from pocketmq.protocol.frames import encode_frame

__all__ = ["PeerCredentials", "PeerLink", "peer_credentials"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """Who this broker is toward its peers: an access key and the secret it proves."""

    access_key: str
    secret: str

    def __repr__(self) -> str:  # never print a secret
        return f"PeerCredentials(access_key={self.access_key!r})"


def peer_credentials(environment: Mapping[str, str] = os.environ) -> PeerCredentials | None:
    """THE seam for the cluster's inner identity (module doc): what every peer link of this
    broker signs in with, or None to sign in as nobody.

    After the cluster key is merged, this returns ``PeerCredentials(CLUSTER_USER,
    load_cluster_key(path).current)`` (``pocketmq.server.auth.cluster``) and
    :meth:`PeerLink._prove` switches to the connection-bound proof (``client_proof``); nothing
    else changes."""
    access_key = environment.get("POCKETMQ_ACCESS_KEY", "")
    secret = environment.get("POCKETMQ_SECRET_KEY", "")
    return PeerCredentials(access_key, secret) if access_key else None


class PeerLink:
    """One connection to one peer broker's native port (module doc); calls run one at a time."""

    def __init__(
        self,
        address: str,
        client_id: str,
        *,
        credentials: PeerCredentials | None = None,
        tls: ssl.SSLContext | None = None,
        timeout: float = 2.0,
    ) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._host = host.strip("[]")
        self._port = int(port)
        self._client_id = client_id
        self._credentials = credentials
        self._tls = tls
        self._timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def call(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        """One request (the link's calls are reads: one that fails on a reused connection is
        sent once more on a new one). :class:`BrokerConnectionError` when the peer cannot be
        reached or does not answer within the timeout; the peer's own refusals as raised."""
        async with self._lock:
            for attempt in (1, 2):
                reused = self._writer is not None
                try:
                    async with asyncio.timeout(self._timeout):
                        if self._writer is None:
                            await self._connect()
                        return await self._exchange(code, body, reply)
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    await self._drop()
                    if attempt == 2 or not reused or isinstance(exc, TimeoutError):
                        raise BrokerConnectionError(
                            f"broker {self.address} unreachable: {_reason(exc)}",
                            address=self.address,
                        ) from exc
                except BaseException:
                    await self._drop()  # a refusal mid-handshake leaves a half-open session
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._tls
        )
        self._decoder = FrameDecoder()
        hello = await self._exchange(
            RequestCode.HELLO,
            w.HelloRequest(PROTOCOL_VERSION, self._client_id, "", "broker"),
            w.HelloResponse,
        )
        if hello.auth_challenge:
            await self._exchange(RequestCode.AUTHENTICATE, self._prove(hello), w.Empty)

    def _prove(self, hello: w.HelloResponse) -> w.AuthenticateRequest:
        """The answer to a peer's challenge (CLUSTER KEY SEAM: the v2 handshake's client_proof
        goes here, with the peer's address as this socket sees it)."""
        credentials = self._credentials
        if credentials is None:
            raise NoPermissionError(
                f"broker {self.address} asks for credentials: give this broker "
                "POCKETMQ_ACCESS_KEY and POCKETMQ_SECRET_KEY of a user allowed Get on the cluster"
            )
        signature = challenge_signature(credentials.secret, hello.auth_challenge, self._client_id)
        return w.AuthenticateRequest(credentials.access_key, signature)

    async def _exchange(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
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
        """Close the connection."""
        async with self._lock:
            await self._drop()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed"
    return str(exc) or type(exc).__name__
