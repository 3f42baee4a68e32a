"""Frame encoding and an incremental decoder: bytes in, frames out, no I/O.

The decoder validates the header before it buffers a body, so a peer announcing a 4 GiB frame
costs nothing but an error.
"""

from __future__ import annotations

import struct
from typing import Final

import msgspec

from pocketmq.errors import ProtocolError
from pocketmq.protocol.codes import FrameKind
from pocketmq.protocol.limits import HEADER_SIZE, MAX_FRAME_BODY

__all__ = ["Frame", "FrameDecoder", "encode_frame"]

_HEADER: Final = struct.Struct("<IBBHI")
_KINDS: Final = frozenset(int(k) for k in FrameKind)


class Frame(msgspec.Struct, frozen=True, gc=False):
    kind: int
    code: int
    request_id: int
    body: bytes


def encode_frame(kind: int, code: int, request_id: int, body: bytes) -> bytes:
    if len(body) > MAX_FRAME_BODY:
        raise ProtocolError(f"frame body of {len(body)} bytes exceeds {MAX_FRAME_BODY}")
    return _HEADER.pack(len(body) + 8, kind, 0, code, request_id) + body


class FrameDecoder:
    """Feed it bytes as they arrive; it returns every complete frame.

    After a :class:`ProtocolError` the stream is unusable (the framing is lost).
    """

    __slots__ = ("_buffer", "_max_body")

    def __init__(self, max_body: int = MAX_FRAME_BODY) -> None:
        self._buffer = bytearray()
        self._max_body = max_body

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        position = 0
        available = len(buffer)
        while available - position >= HEADER_SIZE:
            length, kind, _flags, code, request_id = _HEADER.unpack_from(buffer, position)
            if length < 8 or length - 8 > self._max_body:
                raise ProtocolError(
                    f"frame length {length} outside 8..{self._max_body + 8}"
                    " (not a pocketmq peer, or the stream is corrupt)"
                )
            if kind not in _KINDS:
                raise ProtocolError(f"unknown frame kind {kind}")
            end = position + 4 + length
            if end > available:
                break
            frames.append(
                Frame(kind, code, request_id, bytes(buffer[position + HEADER_SIZE : end]))
            )
            position = end
        if position:
            del buffer[:position]
        return frames
