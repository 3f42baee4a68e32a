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


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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


class RawClient:
    """A client that writes exactly the bytes a test gives it and decodes what comes back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []
        self.closed = False

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, code: int, body: object, request_id: int) -> None:
        await self.send(encode_frame(FrameKind.REQUEST, code, request_id, encode_body(body)))

    async def hello(self) -> Frame:
        await self.request(RequestCode.HELLO, w.HelloRequest(PROTOCOL_VERSION, "raw"), 1)
        return await self.answer(1)

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
        self.frames += self.decoder.feed(data)

    async def answer(self, request_id: int, timeout: float = 5.0) -> Frame:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for frame in self.frames:
                if frame.request_id == request_id:
                    self.frames.remove(frame)
                    return frame
            if self.closed or loop.time() > deadline:
                raise AssertionError(f"no answer to request {request_id}; got {self.frames}")
            await self.read_some(deadline - loop.time())

    async def until_closed(self, timeout: float = 5.0) -> list[Frame]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.closed:
            if loop.time() > deadline:
                raise AssertionError("the server did not close the connection")
            await self.read_some(deadline - loop.time())
        return self.frames

    def close(self) -> None:
        self.writer.close()


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
