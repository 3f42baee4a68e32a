"""GZIP message bodies (``Encoding.GZIP``), decompressed within the broker's size limit.

A gRPC request is at most ``max_message_size`` + 1 MiB on the wire, but a compressed body may
expand a thousandfold: a 1 MiB request once decompressed to 2.1 GB on the event loop and stalled
the broker for 5 s. The body is decompressed incrementally, never past ``max_body`` + 1 bytes:
one byte more than the limit is proof enough that the message is too large.
"""

from __future__ import annotations

import zlib
from typing import Final

from pocketmq.server.grpc.pb import Code
from pocketmq.server.grpc.status import V2Error

__all__ = ["gunzip_body"]

_GZIP_OR_ZLIB: Final = zlib.MAX_WBITS | 32  # accept either header, as RocketMQ's proxy does
_MAX_MEMBERS: Final = 64  # concatenated gzip members (RFC 1952 §2.2) in one body


def gunzip_body(body: bytes, max_body: int) -> bytes:
    """The decompressed body, or a V2Error: ``MESSAGE_CORRUPTED`` if it is not GZIP data,
    ``MESSAGE_BODY_TOO_LARGE`` as soon as it would exceed ``max_body`` bytes."""
    out: list[bytes] = []
    produced = 0
    remaining = body
    for _ in range(_MAX_MEMBERS):
        inflater = zlib.decompressobj(_GZIP_OR_ZLIB)
        try:
            chunk = inflater.decompress(remaining, max_body + 1 - produced)
        except zlib.error as exc:
            raise V2Error(Code.MESSAGE_CORRUPTED, f"GZIP body does not decompress: {exc}") from None
        produced += len(chunk)
        out.append(chunk)
        if produced > max_body or inflater.unconsumed_tail:
            raise V2Error(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"the GZIP body decompresses to more than {max_body} bytes (the broker's limit)",
            )
        if not inflater.eof:
            raise V2Error(Code.MESSAGE_CORRUPTED, "GZIP body is truncated")
        remaining = inflater.unused_data
        if not remaining:
            return b"".join(out)
    raise V2Error(Code.MESSAGE_CORRUPTED, f"GZIP body has more than {_MAX_MEMBERS} members")
