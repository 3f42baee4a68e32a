"""Frames over an asyncio stream, for the replication port.

Replication is one long conversation per slave, mostly a stream in one direction, so it uses
asyncio streams with the native protocol's frames (docs/protocol.md, "Frames") rather than the
request/response server: ``send`` writes a frame and ``frames`` yields the frames that arrive.
Both ends bound what a peer may cost (docs/replication.md §2, "Limits"): frames are small until
the link is authenticated (``max_body``), and a peer silent for ``idle`` seconds ends the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import msgspec

from pocketmq.errors import ProtocolError
from pocketmq.protocol import (
    MAX_FRAME_BEFORE_HELLO,
    MAX_FRAME_BODY,
    Frame,
    FrameDecoder,
    FrameKind,
    encode_body,
    encode_frame,
)

__all__ = ["FrameStream", "LinkIdle"]

_READ = 1 << 20


class LinkIdle(ConnectionError):
    """The peer sent nothing for the idle timeout: the link is given up (a master sends a
    heartbeat every second and a slave acknowledges each, so a live link is never idle)."""


class FrameStream:
    """A framed connection: one side of a replication link. Frames are limited to
    MAX_FRAME_BEFORE_HELLO until :meth:`trust` (the handshake is done)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._decoder = FrameDecoder(MAX_FRAME_BEFORE_HELLO)
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

    def trust(self) -> None:
        """The handshake is done: accept frames up to the protocol's limit (metadata copies and
        log chunks are large)."""
        self._decoder.max_body = MAX_FRAME_BODY

    async def frames(self, idle: float | None = None) -> AsyncIterator[Frame]:
        """The frames that arrive, until the peer closes (a framing error ends the link);
        :class:`LinkIdle` when nothing arrives for ``idle`` seconds."""
        while True:
            try:
                async with asyncio.timeout(idle):
                    data = await self.reader.read(_READ)
            except TimeoutError:
                raise LinkIdle(f"{self.peer} sent nothing for {idle:g} s") from None
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
