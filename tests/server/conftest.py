"""An in-process native server with a tiny handler table, and a raw client for it.

These tests exercise the connection layer (limits, timeouts, errors) without a broker: the
handlers are ``HELLO``, an echo (``GET_ROUTE`` answers with the topic it was asked for), and a
slow one (``PULL`` waits until the test releases it, like a long poll).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import pytest

from pocketmq.protocol import (
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    FrameKind,
    RequestCode,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.tcp import FrameServer

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTransport:
    """Records what a connection asks of its transport (driven without a socket)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def close(self) -> None:
        self.calls.append("close")

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5) if name in ("peername", "sockname") else None


@dataclass
class Toy:
    """What the toy handlers share with the test."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    echo_body: Callable[[str], w.RouteResponse] | None = None


def toy_handlers(toy: Toy) -> HandlerTable:
    def hello(conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
        conn.greeted = True
        return w.HelloResponse(
            PROTOCOL_VERSION, "test", "toy", "broker", MAX_FRAME_BODY, 1024,
            int(conn.limits.idle_timeout * 1000),
        )  # fmt: skip

    def echo(conn: ServerConnection, req: w.GetRouteRequest) -> w.RouteResponse:
        if toy.echo_body is not None:
            return toy.echo_body(req.topic)
        return w.RouteResponse(req.topic, "normal", [], [])

    async def slow(conn: ServerConnection, req: w.PullRequest) -> w.PullResponse:
        await toy.release.wait()
        return w.PullResponse("NO_NEW_MESSAGE", 0, 0, 0)

    return {RequestCode.HELLO: hello, RequestCode.GET_ROUTE: echo, RequestCode.PULL: slow}


class _Decoder(Protocol[T_co]):
    def feed(self, data: bytes, max_frames: int = 0) -> list[T_co]: ...


class StreamClient(Generic[T]):
    """A client that writes exactly the bytes a test gives it and decodes what comes back into
    :attr:`received` (native frames, or remoting commands: tests/server/remoting/conftest.py)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, decoder: _Decoder[T]
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = decoder
        self.received: list[T] = []
        self.closed = False

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_some(self, timeout: float = 2.0) -> None:
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 20), timeout)
        except TimeoutError:
            return
        except ConnectionError:
            data = b""
        if not data:
            self.closed = True
            return
        self.received += self.decoder.feed(data)

    async def next(self, wanted: Callable[[T], bool], timeout: float = 5.0, what: str = "") -> T:
        """The first received item ``wanted`` accepts (``what`` names it in the failure)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for item in self.received:
                if wanted(item):
                    self.received.remove(item)
                    return item
            if self.closed or loop.time() > deadline:
                raise AssertionError(f"{what or 'nothing wanted'} arrived; got {self.received}")
            await self.read_some(deadline - loop.time())

    async def until_closed(self, timeout: float = 5.0) -> list[T]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.closed:
            if loop.time() > deadline:
                raise AssertionError("the server did not close the connection")
            await self.read_some(deadline - loop.time())
        return self.received

    def close(self) -> None:
        self.writer.close()


class RawClient(StreamClient[Frame]):
    """A native client: :attr:`frames` are the frames the server sent not yet taken."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer, FrameDecoder())

    @property
    def frames(self) -> list[Frame]:
        return self.received

    async def request(self, code: int, body: object, request_id: int) -> None:
        await self.send(encode_frame(FrameKind.REQUEST, code, request_id, encode_body(body)))

    async def hello(self) -> Frame:
        await self.request(RequestCode.HELLO, w.HelloRequest(PROTOCOL_VERSION, "raw"), 1)
        return await self.answer(1)

    async def answer(self, request_id: int, timeout: float = 5.0) -> Frame:
        return await self.next(
            lambda frame: frame.request_id == request_id, timeout, f"no answer to {request_id}"
        )


@dataclass
class ToyServer:
    server: FrameServer
    toy: Toy
    clock: FakeClock
    clients: list[RawClient] = field(default_factory=list)

    async def connect(self) -> RawClient:
        reader, writer = await asyncio.open_connection(self.server.host, self.server.port)
        client = RawClient(reader, writer)
        self.clients.append(client)
        return client


StartToy = Callable[..., "contextlib.AbstractAsyncContextManager[ToyServer]"]


@pytest.fixture
def start_toy() -> Callable[..., contextlib.AbstractAsyncContextManager[ToyServer]]:
    @contextlib.asynccontextmanager
    async def start(**limits: float) -> AsyncIterator[ToyServer]:
        from pocketmq.server.native.limits import ConnectionLimits

        toy = Toy()
        clock = FakeClock()
        config = ConnectionLimits(**limits)  # type: ignore[arg-type]
        server = FrameServer(toy_handlers(toy), limits=config, clock=clock)
        await server.start("127.0.0.1", 0)
        running = ToyServer(server, toy, clock)
        try:
            yield running
        finally:
            toy.release.set()
            for client in running.clients:
                client.close()
            await server.close()

    return start
