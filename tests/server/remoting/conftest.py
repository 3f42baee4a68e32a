"""An in-process port serving both protocols — the native toy of tests/server/conftest.py and a
tiny remoting handler table — and a raw remoting client for it (frames encoded with pocketmq's
codec, byte for byte what a test gives).

The remoting handlers: ``GET_ROUTEINFO_BY_TOPIC`` echoes its ``topic`` field in the body (and
the access key that signed it in ``user``), ``PULL_MESSAGE`` waits until the test releases it
(a long poll), ``UPDATE_AND_CREATE_TOPIC`` raises ``TopicNotFoundError``, ``GET_KV_CONFIG`` a
bug (``RuntimeError``), ``HEART_BEAT`` records the connection so a test can push to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pocketmq.errors import TopicNotFoundError
from pocketmq.protocol.remoting import (
    RemotingCommand,
    RemotingFrameDecoder,
    RequestCode,
    ResponseCode,
    encode_command,
)
from pocketmq.protocol.remoting.acl import ACCESS_KEY, SIGNATURE, sign
from pocketmq.server.auth.throttle import FailureThrottle
from pocketmq.server.auth.users import UserStore
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.native.tcp import FrameServer
from pocketmq.server.remoting import (
    RemotingConnection,
    RemotingHandlerTable,
    RemotingPort,
    Reply,
    SignatureCheck,
)

from ..conftest import FakeClock, RawClient, StreamClient, Toy, toy_handlers

ALICE = ("alice", "alice-secret-0123456789")


@dataclass
class RemotingToy:
    """What the remoting handlers share with the test."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    heartbeats: list[RemotingConnection] = field(default_factory=list)


def remoting_handlers(toy: RemotingToy) -> RemotingHandlerTable:
    def route(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        body = request.ext_fields.get("topic", "").encode()
        return Reply(ext_fields={"user": conn.user}, body=body)

    async def pull(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        await toy.release.wait()
        return Reply(19, remark="nothing new")

    def missing(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        raise TopicNotFoundError("no such topic")

    def bug(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        raise RuntimeError("a handler bug")

    def heartbeat(conn: RemotingConnection, request: RemotingCommand) -> None:
        toy.heartbeats.append(conn)

    return {
        RequestCode.GET_ROUTEINFO_BY_TOPIC: route,
        RequestCode.PULL_MESSAGE: pull,
        RequestCode.UPDATE_AND_CREATE_TOPIC: missing,
        RequestCode.GET_KV_CONFIG: bug,
        RequestCode.HEART_BEAT: heartbeat,
    }


def request(
    code: int,
    opaque: int,
    fields: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    oneway: bool = False,
    binary: bool = False,
    keys: tuple[str, str] | None = None,
) -> bytes:
    """A request frame as a client would send it (signed with ``keys`` when given)."""
    ext = dict(fields or {})
    if keys is not None:
        ext[ACCESS_KEY] = keys[0]
        ext[SIGNATURE] = sign(ext, body, keys[1])
    command = RemotingCommand(code, opaque, 2 if oneway else 0, ext, body=body)
    command.serialize_type = 1 if binary else 0
    return encode_command(command)


class RemotingClient(StreamClient[RemotingCommand]):
    """A raw remoting client: writes what the test gives it, decodes what comes back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer, RemotingFrameDecoder())

    async def answer(self, opaque: int, timeout: float = 5.0) -> RemotingCommand:
        """The response to request ``opaque``."""
        return await self.next(
            lambda c: c.is_response and c.opaque == opaque, timeout, f"no answer to {opaque}"
        )

    async def refusal(self) -> str:
        """The remark of the one ``NO_PERMISSION`` answer the server sent before it closed the
        connection (a refused signature)."""
        [answer] = await self.until_closed()
        assert answer.code == ResponseCode.NO_PERMISSION, answer
        return answer.remark or ""


@dataclass
class DualPort:
    """A running port serving both protocols, with what the tests drive it by."""

    server: FrameServer
    port: RemotingPort
    toy: RemotingToy
    native_toy: Toy
    clock: FakeClock
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self.server.host, self.server.port)
        self.writers.append(writer)
        return reader, writer

    async def remoting(self) -> RemotingClient:
        return RemotingClient(*await self._open())

    async def native(self) -> RawClient:
        return RawClient(*await self._open())

    async def heartbeated(
        self, opaque: int = 1, binary: bool = False
    ) -> tuple[RemotingClient, RemotingConnection]:
        """A remoting client that sent ``HEART_BEAT`` (as request ``opaque``), and its
        server-side connection, to push to or ask from."""
        client = await self.remoting()
        await client.send(request(RequestCode.HEART_BEAT, opaque, binary=binary))
        await client.answer(opaque)
        return client, self.toy.heartbeats[-1]


StartDual = Callable[..., "contextlib.AbstractAsyncContextManager[DualPort]"]


@pytest.fixture
def users(tmp_path: Path) -> UserStore:
    store = UserStore(tmp_path / "config")
    store.create(ALICE[0], ALICE[1])
    return store


@pytest.fixture
def start_dual() -> StartDual:
    @contextlib.asynccontextmanager
    async def start(
        *, users: UserStore | None = None, throttle: FailureThrottle | None = None, **limits: Any
    ) -> AsyncIterator[DualPort]:
        toy, native_toy, clock = RemotingToy(), Toy(), FakeClock()
        signatures = SignatureCheck(users, throttle) if users is not None else None
        port = RemotingPort(remoting_handlers(toy), signatures=signatures)
        server = FrameServer(
            toy_handlers(native_toy),
            limits=ConnectionLimits(**limits),
            clock=clock,
            remoting=port,
        )
        await server.start("127.0.0.1", 0)
        running = DualPort(server, port, toy, native_toy, clock)
        try:
            yield running
        finally:
            toy.release.set()
            native_toy.release.set()
            for writer in running.writers:
                writer.close()
            await server.close()

    return start
