"""Frame encoding and an incremental decoder: bytes in, frames out, no I/O.

The decoder validates the header before it buffers a body, so a peer announcing a 4 GiB frame
costs nothing but an error. Its size limit may change between frames (a server accepts only
small frames before the handshake), and a frame being received may be abandoned — its remaining
bytes are then skipped as they arrive — so a server short of memory can refuse one request
without losing the framing of the connection (docs/protocol.md "Limits").

The code lives in :mod:`pocketmq.protocol._framecodec`; this module exports its mypyc-compiled
twin when one was built from the same source and ``POCKETMQ_NO_EXTENSIONS`` is not set, else the
pure module (:mod:`pocketmq.compiled`, docs/design.md "Compiled hot paths").
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from pocketmq.compiled import load

__all__ = [
    "IMPLEMENTATION",
    "Frame",
    "FrameDecoder",
    "FrameHeader",
    "encode_frame",
    "foreign_protocol",
]

_implementation = load("pocketmq.protocol._framecodec")
IMPLEMENTATION: str = _implementation.__name__
"""The module in use: ``pocketmq.protocol._framecodec_c`` (compiled) or ``..._framecodec``."""

if TYPE_CHECKING:
    from pocketmq.protocol._framecodec import Frame, FrameDecoder, FrameHeader, encode_frame
else:
    Frame = _implementation.Frame
    FrameDecoder = _implementation.FrameDecoder
    FrameHeader = _implementation.FrameHeader
    encode_frame = _implementation.encode_frame


# the first 9 bytes an HTTP/2 server sends: a SETTINGS frame (type 4) on stream 0, flags 0 or ACK
_HTTP2_SETTINGS: Final = struct.Struct(">3sBBI")


def foreign_protocol(first_bytes: bytes) -> str | None:
    """The protocol a peer speaks, judged by the first bytes it sent, when that is not
    pocketmq's framing: ``"HTTP/1.x"``, ``"HTTP/2"`` (gRPC, etcd) or ``"TLS"``; None when the
    bytes do not tell. Ask only when the bytes failed to decode as frames (or the peer closed
    before the first frame): a client pointed at the wrong port then says which port it
    reached instead of "frame length 68681728 outside ..." (docs/cli.md, "Errors")."""
    if first_bytes.startswith(b"HTTP/"):
        return "HTTP/1.x"
    if len(first_bytes) >= _HTTP2_SETTINGS.size:
        length, kind, flags, stream = _HTTP2_SETTINGS.unpack_from(first_bytes)
        if kind == 4 and flags in (0, 1) and stream == 0 and int.from_bytes(length) % 6 == 0:
            return "HTTP/2"
    if len(first_bytes) >= 3 and first_bytes[0] in (0x15, 0x16) and first_bytes[1] == 3:
        return "TLS"  # a TLS record: an alert (0x15) or a handshake (0x16), version 3.x
    return None
