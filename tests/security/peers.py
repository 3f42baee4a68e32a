"""Hostile peers for the attacker scenarios of issue 28, speaking the real native protocol.

- :class:`RawPeer`: a client that writes exactly the frames a test gives it (a rogue broker
  registering itself, a connection that never authenticates, wrong logins);
- :class:`Relay`: forwards bytes both ways between its clients and a real broker, as a rogue
  with a route entry would to ride on a client's handshake (TLS passes through untouched);
- :class:`FakeBroker`: answers ``HELLO`` itself — without a challenge, or with one and then a
  wrong proof — and counts who connected: what a client holding credentials must refuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import msgspec

from pocketmq.protocol import (
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import new_nonce


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class RawPeer:
    """One raw connection (over TLS with ``tls``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []
        self.closed = False
        self._ids = 0

    @classmethod
    async def open(cls, address: str, tls: ssl.SSLContext | None = None) -> RawPeer:
        host, port = split(address)
        reader, writer = await asyncio.open_connection(
            host, port, ssl=tls, server_hostname=host if tls else None
        )
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, code: int, body: msgspec.Struct) -> Frame:
        self._ids += 1
        await self.send(encode_frame(FrameKind.REQUEST, code, self._ids, encode_body(body)))
        return await self.answer(self._ids)

    async def hello(self) -> w.HelloResponse:
        hello = w.HelloRequest(PROTOCOL_VERSION, "rogue", "6.6.6", client_nonce=new_nonce())
        frame = await self.request(RequestCode.HELLO, hello)
        return decode_body(frame.body, w.HelloResponse)

    async def _read(self, timeout: float) -> None:
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 20), timeout)
        except TimeoutError:
            return
        except (ConnectionError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return
        self.frames += self.decoder.feed(data)

    async def read_for(self, seconds: float) -> None:
        """Read whatever arrives within ``seconds`` (or until the connection closes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.closed and loop.time() < deadline:
            await self._read(deadline - loop.time())

    async def answer(self, request_id: int, timeout: float = 10.0) -> Frame:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for frame in self.frames:
                if frame.request_id in (request_id, 0):
                    self.frames.remove(frame)
                    return frame
            if self.closed or loop.time() > deadline:
                raise AssertionError(f"no answer to request {request_id}")
            await self._read(deadline - loop.time())

    async def until_closed(self, timeout: float = 10.0) -> list[Frame]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.closed:
            if loop.time() > deadline:
                raise AssertionError("the server did not close the connection")
            await self._read(deadline - loop.time())
        return self.frames

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def aclose(self) -> None:
        """Close and wait (briefly) until closed: a TLS transport shuts down asynchronously."""
        self.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


def remark(frame: Frame) -> str:
    return decode_body(frame.body, w.ErrorBody).remark


class Relay:
    """A TCP forwarder in front of ``target`` on a port of its own (module doc)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.address = ""
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = f"{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._pipes):
            task.cancel()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        host, port = split(self.target)
        up_reader, up_writer = await asyncio.open_connection(host, port)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        for task in (
            asyncio.create_task(pipe(reader, up_writer)),
            asyncio.create_task(pipe(up_reader, writer)),
        ):
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)


class FakeBroker:
    """A native server that is not the broker it claims to be (module doc). ``challenge``:
    whether its HELLO answer asks for authentication (then every AUTHENTICATE is "accepted"
    with a made-up proof, and anything after it is answered with an empty success)."""

    def __init__(self, *, challenge: bool, tls: ssl.SSLContext | None = None) -> None:
        self.challenge = challenge
        self.tls = tls
        self.address = ""
        self.connections = 0
        self.requests: list[int] = []  # codes received after the handshake
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = f"{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        decoder = FrameDecoder()
        try:
            async for frame in _frames(reader, decoder):
                body: msgspec.Struct = w.Empty()
                if frame.code == RequestCode.HELLO:
                    body = w.HelloResponse(
                        PROTOCOL_VERSION, "6.6.6", "broker-a", "broker", MAX_FRAME_BODY,
                        4 * 1024 * 1024, 120_000, new_nonce() if self.challenge else "",
                    )  # fmt: skip
                elif frame.code == RequestCode.AUTHENTICATE:
                    body = w.AuthenticateResponse("0" * 64)
                else:
                    self.requests.append(frame.code)
                writer.write(
                    encode_frame(FrameKind.RESPONSE, 0, frame.request_id, encode_body(body))
                )
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


async def _frames(reader: asyncio.StreamReader, decoder: FrameDecoder) -> AsyncIterator[Frame]:
    while data := await reader.read(65536):
        for frame in decoder.feed(data):
            yield frame
