"""``RemotingCommand``: the one message shape of RocketMQ's remoting protocol, and its two header
serializations (docs/remoting.md, "Frames").

A frame is ``total length (u32) | serialize type (u8) + header length (u24) | header | body``,
big-endian. The header carries ``code``, ``language``, ``version``, ``opaque``, ``flag``,
``remark`` and ``extFields`` (a string map holding the request's or response's named
arguments), either as JSON (serialize type 0, what every 4.x client sends by default) or in
RocketMQ's own binary layout (type 1). Formats follow apache/rocketmq
``remoting/.../protocol/RemotingCommand.java`` (``encode``, ``decode``, ``markProtocolType``)
and ``RocketMQSerializable.java`` (``rocketMQProtocolEncode``/``Decode``).

A response is answered in the serialization of its request: a client that sent JSON may not
read anything else (ali-ons parses every header with ``JSON.parse``).
"""

from __future__ import annotations

import math
import struct
from typing import Annotated, Final

import msgspec

from pocketmq.errors import LocalProtocolError
from pocketmq.protocol.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LANGUAGE_CODES,
    LANGUAGES,
    SerializeType,
)

__all__ = [
    "FRAME_PREFIX",
    "RemotingCommand",
    "decode_header",
    "encode_command",
    "encode_header",
    "request_command",
    "response_to",
]

_Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]

#: ``total length`` and ``serialize type << 24 | header length``, both big-endian.
FRAME_PREFIX: Final = struct.Struct(">II")
# binary header: code (short), language (byte), version (short), opaque (int), flag (int)
_BINARY_FIXED: Final = struct.Struct(">hBhii")
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_MAX_HEADER_FIELD: Final = 0xFFFFFF  # the header length's 24 bits


class RemotingCommand(msgspec.Struct, rename={"ext_fields": "extFields"}, gc=False):
    """One request or response. ``opaque`` correlates a response with its request (the
    requester chooses it); ``flag`` bit 0 marks a response, bit 1 a one-way request.
    ``ext_fields`` are the header's named arguments, always strings here (JSON clients may send
    numbers and booleans: they are turned into the text Java's ``toString`` would give, which is
    also what their signature covers). ``serialize_type`` is how the header travelled, so a
    response can use the same."""

    code: _Int32
    opaque: _Int32 = 0
    flag: _Int32 = 0
    ext_fields: dict[str, str] = {}
    remark: str | None = None
    language: str = "JAVA"
    version: _Int32 = 0
    body: bytes = b""
    serialize_type: int = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        """Whether the command answers a request (``flag`` bit 0)."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """Whether the request expects no response (``flag`` bit 1)."""
        return bool(self.flag & FLAG_ONEWAY)


def response_to(
    request: RemotingCommand,
    code: int,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
    remark: str | None = None,
    version: int = 0,
) -> RemotingCommand:
    """The response to ``request``: its opaque, the response flag, its header serialization."""
    return RemotingCommand(
        code,
        request.opaque,
        FLAG_RESPONSE,
        ext_fields if ext_fields is not None else {},
        remark,
        "JAVA",
        version,
        body,
        request.serialize_type,
    )


def request_command(
    code: int,
    opaque: int,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
    oneway: bool = False,
    serialize_type: int = SerializeType.JSON,
    version: int = 0,
) -> RemotingCommand:
    """A request the server sends on a client's connection (a transaction check-back, a consumer
    group change, a running-info query): ``opaque`` is the server's own counter."""
    return RemotingCommand(
        code,
        opaque,
        FLAG_ONEWAY if oneway else 0,
        ext_fields if ext_fields is not None else {},
        None,
        "JAVA",
        version,
        body,
        serialize_type,
    )


# -- JSON headers -------------------------------------------------------------------------


class _JsonOut(msgspec.Struct, omit_defaults=True, gc=False):
    # fastjson's fields (it also sorts them, which no reader depends on); a null remark is left
    # out, as fastjson leaves null fields out
    code: int
    extFields: dict[str, str]
    flag: int
    language: str
    opaque: int
    version: int
    remark: str | None = None


class _LenientJson(msgspec.Struct, rename={"ext_fields": "extFields"}, gc=False):
    # what a JSON client may send besides strings: numbers and booleans as ext fields (ali-ons
    # copies its header object as is), a language given by number
    code: _Int32
    opaque: _Int32 = 0
    flag: _Int32 = 0
    ext_fields: dict[str, str | int | float | bool | None] | None = None
    remark: str | None = None
    language: str | int = "JAVA"
    version: _Int32 = 0


_json_encode = msgspec.json.Encoder().encode
_strict_json = msgspec.json.Decoder(RemotingCommand)
_lenient_json = msgspec.json.Decoder(_LenientJson)


def _java_text(value: str | int | float | bool) -> str:
    """A JSON scalar as the string a Java (or JavaScript) ``toString`` gives for it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return str(value)


def _decode_json(header: bytes | memoryview) -> RemotingCommand:
    try:
        command = _strict_json.decode(header)
    except msgspec.ValidationError:
        return _decode_lenient_json(header)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise LocalProtocolError(f"malformed JSON remoting header: {exc}") from None
    command.body = b""
    command.serialize_type = SerializeType.JSON
    return command


def _decode_lenient_json(header: bytes | memoryview) -> RemotingCommand:
    # the strict decoder stops at the first field of the wrong type, so the text after it has
    # not been parsed yet: it may still be malformed
    try:
        raw = _lenient_json.decode(header)
    except msgspec.ValidationError as exc:
        raise LocalProtocolError(f"invalid JSON remoting header: {exc}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise LocalProtocolError(f"malformed JSON remoting header: {exc}") from None
    fields = {
        key: _java_text(value) for key, value in (raw.ext_fields or {}).items() if value is not None
    }
    language = raw.language
    if isinstance(language, int):
        language = LANGUAGES.get(language, "OTHER")
    return RemotingCommand(
        raw.code, raw.opaque, raw.flag, fields, raw.remark, language, raw.version
    )


def _encode_json(command: RemotingCommand) -> bytes:
    return _json_encode(
        _JsonOut(
            command.code,
            command.ext_fields,
            command.flag,
            command.language,
            command.opaque,
            command.version,
            command.remark,
        )
    )


# -- binary headers -----------------------------------------------------------------------


def _encode_binary(command: RemotingCommand) -> bytes:
    if not (-(2**15) <= command.code < 2**15 and -(2**15) <= command.version < 2**15):
        raise LocalProtocolError(
            f"code {command.code} or version {command.version} does not fit the binary header's"
            " 16 bits (send it with a JSON header)"
        )
    language = LANGUAGE_CODES.get(command.language, LANGUAGE_CODES["OTHER"])
    parts = [
        _BINARY_FIXED.pack(command.code, language, command.version, command.opaque, command.flag)
    ]
    remark = command.remark.encode() if command.remark else b""
    parts += (_I32.pack(len(remark)), remark)
    fields: list[bytes] = []
    for key, value in command.ext_fields.items():
        raw_key, raw_value = key.encode(), value.encode()
        if len(raw_key) >= 2**15:
            raise LocalProtocolError(f"ext field name of {len(raw_key)} bytes exceeds 32767")
        fields += (_I16.pack(len(raw_key)), raw_key, _I32.pack(len(raw_value)), raw_value)
    table = b"".join(fields)
    parts += (_I32.pack(len(table)), table)
    return b"".join(parts)


def _text(data: bytes | memoryview, start: int, size: int, end: int, what: str) -> str:
    if size < 0 or start + size > end:
        raise LocalProtocolError(
            f"binary remoting header: {what} of {size} bytes overruns the header"
        )
    try:
        return str(data[start : start + size], "utf-8")
    except UnicodeDecodeError:
        raise LocalProtocolError(f"binary remoting header: {what} is not UTF-8") from None


def _decode_binary(header: bytes | memoryview) -> RemotingCommand:
    end = len(header)
    if end < _BINARY_FIXED.size + 8:
        raise LocalProtocolError(f"binary remoting header of {end} bytes is shorter than 21")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    position = _BINARY_FIXED.size
    (size,) = _I32.unpack_from(header, position)
    remark = _text(header, position + 4, size, end, "remark") if size else None
    position += 4 + size
    if position + 4 > end:
        raise LocalProtocolError("binary remoting header ends before its ext fields")
    (size,) = _I32.unpack_from(header, position)
    position += 4
    if size < 0 or position + size != end:
        raise LocalProtocolError(
            f"binary remoting header: ext fields of {size} bytes do not end it"
        )
    fields: dict[str, str] = {}
    while position < end:
        if position + 2 > end:
            raise LocalProtocolError("binary remoting header: truncated ext field name")
        (size,) = _I16.unpack_from(header, position)
        key = _text(header, position + 2, size, end, "ext field name")
        position += 2 + size
        if position + 4 > end:
            raise LocalProtocolError("binary remoting header: truncated ext field value")
        (size,) = _I32.unpack_from(header, position)
        fields[key] = _text(header, position + 4, size, end, "ext field value")
        position += 4 + size
    return RemotingCommand(
        code,
        opaque,
        flag,
        fields,
        remark,
        LANGUAGES.get(language, "OTHER"),
        version,
        b"",
        SerializeType.ROCKETMQ,
    )


# -- frames -------------------------------------------------------------------------------


def decode_header(serialize_type: int, header: bytes | memoryview) -> RemotingCommand:
    """The command a header describes (its body still empty). A header that does not decode is
    a :class:`ProtocolError`: the frame's requester cannot be told which request failed."""
    if serialize_type == SerializeType.JSON:
        return _decode_json(header)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary(header)
    raise LocalProtocolError(f"unknown remoting serialize type {serialize_type}")


def encode_header(command: RemotingCommand) -> bytes:
    """The header of ``command`` in its own serialization; a number outside Java's ``int``
    or text that UTF-8 cannot encode (a lone surrogate) is a :class:`ProtocolError`."""
    for name, value in (("code", command.code), ("opaque", command.opaque), ("flag", command.flag)):
        if not -(2**31) <= value < 2**31:
            raise LocalProtocolError(f"remoting {name} {value} does not fit a Java int")
    try:
        if command.serialize_type == SerializeType.ROCKETMQ:
            return _encode_binary(command)
        return _encode_json(command)
    except UnicodeEncodeError:
        raise LocalProtocolError(
            "remoting header holds text that is not encodable as UTF-8"
        ) from None


def encode_command(command: RemotingCommand) -> bytes:
    """The whole frame of ``command``: length, serialize type and header length, header, body."""
    header = encode_header(command)
    if len(header) > _MAX_HEADER_FIELD:
        raise LocalProtocolError(f"remoting header of {len(header)} bytes exceeds 16 MiB")
    prefix = FRAME_PREFIX.pack(
        4 + len(header) + len(command.body), command.serialize_type << 24 | len(header)
    )
    return b"".join((prefix, header, command.body))
