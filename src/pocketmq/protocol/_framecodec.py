"""Frame encoding and an incremental decoder: bytes in, frames out, no I/O.

This is the pure-Python implementation that :mod:`pocketmq.protocol.frames` exports; the build
also compiles it with mypyc as ``_framecodec_c`` (docs/design.md, "Compiled hot paths"), so it
must stay within what mypyc compiles, and correctness lives here.

The decoder validates the header before it buffers a body, so a peer announcing a 4 GiB frame
costs nothing but an error. Its size limit may change between frames (a server accepts only
small frames before the handshake), and a frame being received may be abandoned — its remaining
bytes are then skipped as they arrive — so a server short of memory can refuse one request
without losing the framing of the connection (docs/protocol.md "Limits").
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

import msgspec

from pocketmq.errors import LocalProtocolError
from pocketmq.protocol.codes import FrameKind
from pocketmq.protocol.limits import HEADER_SIZE, MAX_FRAME_BODY

__all__ = ["Frame", "FrameDecoder", "FrameHeader", "encode_frame"]

_HEADER: Final = struct.Struct("<IBBHI")
_KINDS: Final = frozenset(int(k) for k in FrameKind)


class Frame(msgspec.Struct, frozen=True, gc=False):
    """One decoded frame: the header fields the connection layer dispatches on, and the
    still-encoded body, which only the operation's handler decodes (into its own structure)."""

    kind: int
    code: int
    request_id: int
    body: bytes


class FrameHeader(NamedTuple):
    """The header of a frame that was abandoned before its body arrived."""

    kind: int
    code: int
    request_id: int
    body_size: int


def encode_frame(kind: int, code: int, request_id: int, body: bytes) -> bytes:
    """Prefix ``body`` with its header; refuses a body over the frame limit here, so an oversize
    response fails its own request instead of a peer's framing."""
    if len(body) > MAX_FRAME_BODY:
        raise LocalProtocolError(f"frame body of {len(body)} bytes exceeds {MAX_FRAME_BODY}")
    return _HEADER.pack(len(body) + 8, kind, 0, code, request_id) + body


class FrameDecoder:
    """Feed it bytes as they arrive; it returns the complete frames.

    ``max_body`` may be changed at any time; it applies to every header decoded afterwards.
    After a :class:`ProtocolError` the stream is unusable (the framing is lost).
    """

    __slots__ = ("_buffer", "_skip", "max_body")

    def __init__(self, max_body: int = MAX_FRAME_BODY) -> None:
        self._buffer = bytearray()
        self._skip = 0
        self.max_body = max_body

    @property
    def buffered(self) -> int:
        """Bytes held for frames not yet complete."""
        return len(self._buffer)

    def feed(self, data: bytes, max_frames: int = 0) -> list[Frame]:
        """Take ``data``; return the frames now complete (at most ``max_frames`` when it is
        positive: the rest stay buffered for the next call, which may pass ``b""``)."""
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            data = data[skipped:]
        buffer = self._buffer
        # Nothing buffered (the usual case): frames are cut straight from ``data``, one copy
        # of each body; only a partial frame at its end is buffered. Appending everything to
        # the buffer first copied each body three times (docs/benchmarks.md, "The push
        # consumer's client CPU per message").
        source: bytes | bytearray
        if buffer or type(data) is not bytes:
            buffer += data
            source = buffer
        else:
            source = data
        frames: list[Frame] = []
        position = 0
        available = len(source)
        while available - position >= HEADER_SIZE:
            length, kind, _flags, code, request_id = _HEADER.unpack_from(source, position)
            if length < 8 or length - 8 > self.max_body:
                if source is not buffer:
                    buffer += data  # what the buffered path holds after an error
                raise LocalProtocolError(
                    f"frame length {length} outside 8..{self.max_body + 8}"
                    " (not a pocketmq peer, or the stream is corrupt)"
                )
            if kind not in _KINDS:
                if source is not buffer:
                    buffer += data
                raise LocalProtocolError(f"unknown frame kind {kind}")
            end = position + 4 + length
            if end > available:
                break
            frames.append(
                Frame(kind, code, request_id, bytes(source[position + HEADER_SIZE : end]))
            )
            position = end
            if len(frames) == max_frames:
                break
        if source is buffer:
            if position:
                del buffer[:position]
        elif position < available:
            buffer += memoryview(data)[position:]
        return frames

    def abandon_partial(self) -> FrameHeader | None:
        """Drop the frame being received (its header is complete, its body is not): free what
        is buffered and skip the rest of its body as it arrives. Returns its header, or None
        when no such frame is buffered. Call it only after :meth:`feed` returned every complete
        frame (the buffer then holds at most one partial frame)."""
        buffer = self._buffer
        if len(buffer) < HEADER_SIZE:
            return None
        length, kind, _flags, code, request_id = _HEADER.unpack_from(buffer, 0)
        if 4 + length <= len(buffer):
            return None  # complete: feed() has not been called since it arrived
        self._skip = 4 + length - len(buffer)
        self._buffer = bytearray()
        return FrameHeader(kind, code, request_id, length - 8)
