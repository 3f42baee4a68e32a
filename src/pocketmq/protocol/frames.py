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

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["IMPLEMENTATION", "Frame", "FrameDecoder", "FrameHeader", "encode_frame"]

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
