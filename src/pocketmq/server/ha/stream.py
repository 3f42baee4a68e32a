"""Frames over an asyncio stream, for the replication port.

Replication is one long conversation per slave, mostly a stream in one direction, so it uses
asyncio streams with the native protocol's frames (docs/protocol.md, "Frames") rather than the
request/response server: ``send`` writes a frame and ``frames`` yields the frames that arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import msgspec

from pocketmq.errors import ProtocolError
from pocketmq.protocol import Frame, FrameDecoder, FrameKind, encode_body, encode_frame

__all__ = ["FrameStream"]

_READ = 1 << 20


class FrameStream:
    """A framed connection: one side of a replication link."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"

    def send(self, kind: FrameKind, code: int, body: msgspec.Struct, request_id: int = 0) -> int:
        """Queue one frame (a request gets the next request id, returned)."""
        if kind is FrameKind.REQUEST and not request_id:
            request_id = next(self._ids) & 0xFFFFFFFF or 1
        self.writer.write(encode_frame(kind, code, request_id, encode_body(body)))
        return request_id

    async def drain(self) -> None:
        """Wait until the socket has taken what was queued (back-pressure from the peer)."""
        await self.writer.drain()

    async def frames(self, idle: float | None = None) -> AsyncIterator[Frame]:
        """The frames that arrive, until the peer closes (a framing error ends the link), or
        ConnectionError when nothing arrives for ``idle`` seconds (a peer that stopped)."""
        while True:
            try:
                async with asyncio.timeout(idle):
                    data = await self.reader.read(_READ)
            except TimeoutError:
                raise ConnectionError(f"nothing heard from {self.peer} for {idle:.0f} s") from None
            if not data:
                return
            try:
                frames = self._decoder.feed(data)
            except ProtocolError:
                return
            for frame in frames:
                yield frame

    async def close(self) -> None:
        """Close the connection; errors of a peer already gone are ignored."""
        if not self.writer.is_closing():
            self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
