"""A message's ``sysFlag`` bits and body compression (docs/remoting.md, "Messages").

Bits follow apache/rocketmq ``common/.../sysflag/MessageSysFlag.java``: bit 0 compressed body,
bits 2-3 the transaction type, bits 4-5 IPv6 born and store hosts, bits 8-10 the compression
algorithm (``CompressionType.java``: 1 LZ4, 2 ZSTD, 3 ZLIB; 0 means ZLIB for clients older
than the field). The Java producer compresses bodies of 4 KiB and more with zlib (``Deflater``,
level 5, zlib framing); so does ali-ons (``zlib.deflateSync``). Only zlib is available to
pocketmq: a body compressed otherwise is refused with a clear error.

Inflating is bounded: a small compressed body claiming gigabytes is a :class:`ProtocolError`
once it passes ``max_size``, never an allocation of that size.
"""

from __future__ import annotations

import zlib
from typing import Final

from pocketmq.errors import LocalProtocolError

__all__ = [
    "BORNHOST_V6",
    "COMPRESSED",
    "COMPRESSION_MASK",
    "COMPRESSION_ZLIB",
    "MULTI_TAGS",
    "STOREHOST_V6",
    "TRANSACTION_COMMIT",
    "TRANSACTION_MASK",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED",
    "TRANSACTION_ROLLBACK",
    "compress_body",
    "inflate_body",
]

COMPRESSED: Final = 0x1
MULTI_TAGS: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0
TRANSACTION_PREPARED: Final = 0x1 << 2
TRANSACTION_COMMIT: Final = 0x2 << 2
TRANSACTION_ROLLBACK: Final = 0x3 << 2
TRANSACTION_MASK: Final = 0x3 << 2
BORNHOST_V6: Final = 0x1 << 4
STOREHOST_V6: Final = 0x1 << 5
COMPRESSION_MASK: Final = 0x7 << 8
COMPRESSION_ZLIB: Final = 0x3 << 8
_NAMES: Final = {1: "LZ4", 2: "ZSTD"}
#: The level RocketMQ's producers use (``DefaultMQProducer.compressLevel``).
_LEVEL: Final = 5


def compress_body(body: bytes, level: int = _LEVEL) -> bytes:
    """``body`` compressed as the Java producer does (zlib framing); set :data:`COMPRESSED` and
    :data:`COMPRESSION_ZLIB` in the message's ``sysFlag`` with it."""
    return zlib.compress(body, level)


def inflate_body(body: bytes, sys_flag: int, max_size: int) -> bytes:
    """The body a ``sysFlag`` marked compressed had before compression, at most ``max_size``
    bytes; an unsupported algorithm, a corrupt stream or a larger result is a
    :class:`ProtocolError`."""
    algorithm = (sys_flag & COMPRESSION_MASK) >> 8
    if algorithm not in (0, 3):
        name = _NAMES.get(algorithm, f"type {algorithm}")
        raise LocalProtocolError(f"message body compressed with {name}: only zlib is supported")
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, max_size + 1)
    except zlib.error as exc:
        raise LocalProtocolError(f"compressed message body does not inflate: {exc}") from None
    if len(plain) > max_size:
        raise LocalProtocolError(f"compressed message body inflates past {max_size} bytes")
    if not inflater.eof:
        raise LocalProtocolError("compressed message body is truncated")
    return plain
