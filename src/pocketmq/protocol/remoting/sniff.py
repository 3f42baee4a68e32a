"""Which protocol a new connection speaks, from its first nine bytes (docs/remoting.md, "Where
it listens").

Both protocols' clients speak first, so a server listening for both on one port reads nine
bytes and decides:

- a native client's first frame is a ``HELLO``: a little-endian length, then kind 0 (request),
  flags 0, code 1 (``00 00 01 00``), then a MessagePack array (``0x90``-``0x9f``, ``0xdc``,
  ``0xdd``) (``pocketmq.protocol.frames``, docs/protocol.md);
- a remoting frame is a big-endian length, then the serialize type (0 JSON, 1 binary) and a
  24-bit header length, then the header: a JSON header's first byte is ``{`` (or JSON
  whitespace).

Byte 4 is 1 only for a binary remoting header (a native first frame has kind 0 there), and
byte 8 is ``{`` only for a JSON remoting header (a native ``HELLO`` body starts with an array
marker), so the two never overlap. Anything else is neither (``UNKNOWN``).
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["SNIFF_SIZE", "WireProtocol", "sniff_protocol"]

#: Bytes needed to decide.
SNIFF_SIZE: Final = 9
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
    """The protocol whose first frame begins with ``first``; None while fewer than
    :data:`SNIFF_SIZE` bytes have arrived (wait for more)."""
    if len(first) < SNIFF_SIZE:
        return None
    if first[4] == 1 or (first[4] == 0 and first[8] in _JSON_START):
        return WireProtocol.REMOTING
    if first[4:8] == _NATIVE_HELLO and first[8] in _MSGPACK_ARRAYS:
        return WireProtocol.NATIVE
    return WireProtocol.UNKNOWN
