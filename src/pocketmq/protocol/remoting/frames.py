"""An incremental decoder of remoting frames: bytes in, :class:`RemotingCommand` out, no I/O.

As the native decoder does (``pocketmq.protocol.frames``), it checks a frame's length and its
header's length and serialize type as soon as their eight bytes arrive, before it buffers
anything else, so a peer announcing a 4 GiB frame or a header longer than its frame costs an
error, not memory. A frame being received may be abandoned (its remaining bytes are skipped as
they arrive) once its header is complete, so a server short of memory can refuse one request —
answering its ``opaque`` — without losing the connection (docs/remoting.md, "Limits").

RocketMQ closes a connection whose frame does not decode (``NettyDecoder``); so does a server
using this decoder: after a :class:`ProtocolError` the stream is unusable. The frames complete
before the bad one are still returned first (the error is raised by the next call), so pipelined
requests ahead of garbage are served, not dropped.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from pocketmq.errors import LocalProtocolError, ProtocolError
from pocketmq.protocol.remoting.command import FRAME_PREFIX, RemotingCommand, decode_header

__all__ = ["MAX_FRAME", "MAX_HEADER", "AbandonedFrame", "RemotingFrameDecoder"]

#: The largest frame, its 4-byte length included: RocketMQ's default
#: ``com.rocketmq.remoting.frameMaxLength`` (16 MiB, ``NettyDecoder``).
MAX_FRAME: Final = 16 * 1024 * 1024
#: The largest header. A send's header carries the message's properties (at most 32 KiB of
#: UTF-8, up to six times that once JSON escapes the separators), so 256 KiB holds any valid one.
MAX_HEADER: Final = 256 * 1024
_SERIALIZE_TYPES: Final = (0, 1)
_U32: Final = struct.Struct(">I")


class AbandonedFrame(NamedTuple):
    """A frame dropped before its body arrived: its header (so the request can be answered)
    and the size of the body that will be skipped."""

    command: RemotingCommand
    body_size: int


class RemotingFrameDecoder:
    """Feed it bytes as they arrive; it returns the complete commands.

    ``max_frame`` and ``max_header`` may be changed at any time; they apply to every frame
    whose prefix is read afterwards.
    """

    __slots__ = ("_buffer", "_error", "_skip", "max_frame", "max_header")

    def __init__(self, max_frame: int = MAX_FRAME, max_header: int = MAX_HEADER) -> None:
        self._buffer = bytearray()
        self._skip = 0
        self._error: ProtocolError | None = None
        self.max_frame = max_frame
        self.max_header = max_header

    @property
    def buffered(self) -> int:
        """Bytes held for frames not yet complete."""
        return len(self._buffer)

    def _check(self, total: int, word: int) -> tuple[int, int]:
        """The serialize type and header length of a frame's prefix, checked against limits."""
        if total < 4 or total + 4 > self.max_frame:
            raise LocalProtocolError(
                f"remoting frame length {total} outside 4..{self.max_frame - 4}"
                " (not a RocketMQ remoting peer, or the stream is corrupt)"
            )
        serialize_type, header_size = word >> 24, word & 0xFFFFFF
        if serialize_type not in _SERIALIZE_TYPES:
            raise LocalProtocolError(f"unknown remoting serialize type {serialize_type}")
        if header_size > total - 4:
            raise LocalProtocolError(f"remoting header of {header_size} bytes exceeds its frame")
        if header_size > self.max_header:
            raise LocalProtocolError(
                f"remoting header of {header_size} bytes exceeds {self.max_header}"
            )
        return serialize_type, header_size

    def feed(self, data: bytes, max_frames: int = 0) -> list[RemotingCommand]:
        """Take ``data``; return the commands now complete (at most ``max_frames`` when it is
        positive: the rest stay buffered for the next call, which may pass ``b""``). A malformed
        frame raises :class:`ProtocolError` once the frames before it have been returned."""
        if self._error is not None:
            raise self._error
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            data = data[skipped:]
        buffer = self._buffer
        buffer += data
        commands: list[RemotingCommand] = []
        position = 0
        available = len(buffer)
        view = memoryview(buffer)
        try:
            while available - position >= 8:
                total, word = FRAME_PREFIX.unpack_from(buffer, position)
                serialize_type, header_size = self._check(total, word)
                end = position + 4 + total
                if end > available:
                    break
                header_end = position + 8 + header_size
                command = decode_header(serialize_type, view[position + 8 : header_end])
                if end > header_end:
                    command.body = bytes(view[header_end:end])
                commands.append(command)
                position = end
                if len(commands) == max_frames:
                    break
            if 4 <= available - position < 8:  # a bad length fails before its next bytes
                (total,) = _U32.unpack_from(buffer, position)
                if total < 4 or total + 4 > self.max_frame:
                    self._check(total, 0)
        except ProtocolError as error:
            self._error = error
            if not commands:
                raise
        finally:
            view.release()
        if self._error is not None:
            self._buffer = bytearray()
        elif position:
            del buffer[:position]
        return commands

    def partial_header(self) -> AbandonedFrame | None:
        """The header and body size of the frame being received, once its header is complete
        and its body is not; None otherwise. Nothing is dropped: a server may decide from the
        header whether to read the rest (a signed request) or not (:meth:`abandon_partial`).
        Call it only after :meth:`feed` returned every complete frame. A header that does not
        decode raises :class:`ProtocolError` (the stream is unusable from then on)."""
        buffer = self._buffer
        if len(buffer) < 8:
            return None
        total, word = FRAME_PREFIX.unpack_from(buffer, 0)
        serialize_type, header_size = self._check(total, word)
        if len(buffer) < 8 + header_size or 4 + total <= len(buffer):
            return None  # header incomplete, or the frame is complete (feed() not called)
        try:
            command = decode_header(serialize_type, bytes(buffer[8 : 8 + header_size]))
        except ProtocolError as error:
            self._error = error
            self._buffer = bytearray()
            raise
        return AbandonedFrame(command, total - 4 - header_size)

    def abandon_partial(self) -> AbandonedFrame | None:
        """Drop the frame being received when its header is complete and its body is not: free
        what is buffered and skip the rest as it arrives. Returns the frame's header and body
        size, or None when no such frame is buffered. Call it only after :meth:`feed` returned
        every complete frame (the buffer then holds at most one partial frame)."""
        partial = self.partial_header()
        if partial is not None:
            (total,) = _U32.unpack_from(self._buffer, 0)
            self._skip = 4 + total - len(self._buffer)
            self._buffer = bytearray()
        return partial
