"""The base of every native-protocol body, and how bodies are encoded and decoded.

Structures are frozen and encoded as MessagePack arrays (``array_like``): compact, fast, and
validated on decode — a wrong type is a :class:`~pocketmq.errors.ProtocolError` naming the field,
never a half-built request. New fields go at the end with a default so older peers keep working.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from pocketmq.errors import LocalProtocolError

__all__ = [
    "DECODERS",
    "Body",
    "Empty",
    "ErrorBody",
    "decode_body",
    "encode_body",
    "encode_body_fast",
]


class Body(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The base of the request and response bodies (module doc)."""


class Empty(Body, frozen=True):
    """The body of a request that needs no arguments (listing topics, groups, brokers, the broker's
    status) and of a plain "ok" response."""


class ErrorBody(Body, frozen=True):
    """What a response with a result code other than SUCCESS carries: the reason in words, for the
    error the client raises."""

    remark: str = ""


_encoder = msgspec.msgpack.Encoder()
encode_body_fast: Final = _encoder.encode
""":func:`encode_body` itself, the encoder's own method: no Python frame per answer on a
server's per-frame path (docs/benchmarks.md, "A lone send's per-request cost")."""
DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}
""":func:`decode_body`'s decoder per body type, made at the first decode of the type: a per-frame
path may decode with one directly and call :func:`decode_body` for a type not seen yet, or
again to name what is wrong with a body its decoder refused."""


def encode_body(body: msgspec.Struct) -> bytes:
    """Encode a request or response body for a frame (MessagePack array, the structures' declaration
    order)."""
    return _encoder.encode(body)


T = TypeVar("T")


def decode_body(data: bytes, kind: type[T]) -> T:
    """Decode ``data`` as ``kind``; a mismatch is a :class:`ProtocolError` that names the field."""
    decoder = DECODERS.get(kind)
    if decoder is None:
        decoder = DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        raise LocalProtocolError(f"invalid {kind.__name__}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise LocalProtocolError(f"malformed {kind.__name__} body: {exc}") from None
    except UnicodeDecodeError as exc:
        raise LocalProtocolError(
            f"invalid {kind.__name__}: a string is not UTF-8 ({exc})"
        ) from None
