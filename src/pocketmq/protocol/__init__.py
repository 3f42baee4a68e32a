"""The native wire protocol, sans-IO: frames, operation codes, message structures, limits.

Nothing here touches a socket; ``pocketmq.server`` and ``pocketmq.client`` feed it bytes.
See docs/protocol.md.
"""

from pocketmq.protocol import structs
from pocketmq.protocol.codes import FrameKind, RequestCode
from pocketmq.protocol.frames import (
    Frame,
    FrameDecoder,
    FrameHeader,
    encode_frame,
    foreign_protocol,
)
from pocketmq.protocol.limits import (
    HEADER_SIZE,
    MAX_FRAME_BEFORE_HELLO,
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
)
from pocketmq.protocol.structs import decode_body, encode_body

__all__ = [
    "HEADER_SIZE",
    "MAX_FRAME_BEFORE_HELLO",
    "MAX_FRAME_BODY",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameDecoder",
    "FrameHeader",
    "FrameKind",
    "RequestCode",
    "decode_body",
    "encode_body",
    "encode_frame",
    "foreign_protocol",
    "structs",
]
