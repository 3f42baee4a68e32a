"""Which protocol a new connection speaks, from its first bytes (docs/remoting.md, "Where it
listens").

Both protocols' clients speak first, so a server listening for both on one port reads at most
thirteen bytes and decides:

- a native client's first frame is a ``HELLO`` (``pocketmq.protocol.frames``, docs/protocol.md):
  a little-endian length, kind 0 (request), flags 0, code 1 (bytes 4-7: ``00 00 01 00``), a
  4-byte request id, then the body, a MessagePack array (byte 12: ``0x90``-``0x9f``, ``0xdc``,
  ``0xdd``);
- a remoting frame (apache/rocketmq ``RemotingCommand.encode``) is a big-endian length, the
  serialize type (byte 4: 0 JSON, 1 binary) and a 24-bit header length, then the header: a JSON
  header starts with ``{`` (byte 8).

Byte 4 is 1 only for a binary remoting header (a native first frame has kind 0 there). Bytes
4-7 of a native ``HELLO`` also read as a remoting JSON header of exactly 256 bytes, and its
request id may put ``{`` in byte 8, so in that one case byte 12 decides: a MessagePack array
marker is never the fifth byte of a client's JSON header (``{"code":...``). Anything else is
neither (``UNKNOWN``).
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["SNIFF_SIZE", "WireProtocol", "sniff_protocol"]

#: The most bytes a decision needs.
SNIFF_SIZE: Final = 13
_NATIVE_HELLO: Final = b"\x00\x00\x01\x00"
_MSGPACK_ARRAYS: Final = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
_JSON_START: Final = frozenset(b"{ \t\r\n")


class WireProtocol(enum.Enum):
    """The protocols a client port can tell apart; ``UNKNOWN`` is neither (served as native, so
    the peer gets the native framing error it gets today)."""

    NATIVE = "native"
    REMOTING = "remoting"
    UNKNOWN = "unknown"


def sniff_protocol(first: bytes) -> WireProtocol | None:
    """The protocol whose first frame begins with ``first``; None while too few bytes have
    arrived to tell (at most :data:`SNIFF_SIZE` are ever needed; a remoting frame is told from
    five or nine, so a short remoting request is never kept waiting)."""
    if len(first) < 5:
        return None
    if first[4] == 1:
        return WireProtocol.REMOTING
    if first[4] != 0:
        return WireProtocol.UNKNOWN
    if len(first) < 9:
        return None
    if first[4:8] == _NATIVE_HELLO:
        if len(first) < SNIFF_SIZE:
            return None  # a HELLO is longer; a remoting frame with this prefix too (264+)
        if first[12] in _MSGPACK_ARRAYS:
            return WireProtocol.NATIVE
    if first[8] in _JSON_START:
        return WireProtocol.REMOTING
    return WireProtocol.UNKNOWN
