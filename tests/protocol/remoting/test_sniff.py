"""Telling a native client from a remoting one by its first bytes (docs/remoting.md,
"Where it listens"): the native ``HELLO`` frame of ``pocketmq.protocol.frames`` against the
remoting frame of apache/rocketmq ``RemotingCommand.encode``."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from pocketmq.protocol import FrameKind, RequestCode, encode_body, encode_frame
from pocketmq.protocol import structs as w
from pocketmq.protocol.remoting import (
    SNIFF_SIZE,
    RemotingCommand,
    SerializeType,
    WireProtocol,
    encode_command,
    sniff_protocol,
)


def _hello(
    client_id: str, version: str = "1.0", language: str = "python", request_id: int = 1
) -> bytes:
    body = encode_body(w.HelloRequest(1, client_id, version, language))
    return encode_frame(FrameKind.REQUEST, RequestCode.HELLO, request_id, body)


@given(
    st.text(max_size=3000),
    st.text(max_size=40),
    st.text(max_size=20),
    st.one_of(st.integers(1, 2**32 - 1), st.sampled_from([0x7B, 0x7B7B7B7B, 0x20, 0x0A])),
)
def test_every_native_hello_is_native(
    client_id: str, version: str, language: str, request_id: int
) -> None:
    # any request id, including those whose bytes read as JSON's "{" or whitespace
    hello = _hello(client_id, version, language, request_id)
    assert sniff_protocol(hello[:SNIFF_SIZE]) is WireProtocol.NATIVE
    assert sniff_protocol(hello[:12]) is None


@given(
    st.integers(0, 32767),
    st.dictionaries(st.text(max_size=30), st.text(max_size=300), max_size=8),
    st.binary(max_size=100),
    st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)
def test_every_remoting_request_is_remoting(
    code: int, fields: dict[str, str], body: bytes, serialize_type: SerializeType
) -> None:
    command = RemotingCommand(code, ext_fields=fields, body=body, serialize_type=serialize_type)
    assert sniff_protocol(encode_command(command)[:SNIFF_SIZE]) is WireProtocol.REMOTING


def test_a_remoting_frame_is_told_before_thirteen_bytes() -> None:
    json_frame = encode_command(RemotingCommand(105))
    assert sniff_protocol(json_frame[:9]) is WireProtocol.REMOTING
    binary = encode_command(RemotingCommand(105, serialize_type=SerializeType.ROCKETMQ))
    assert sniff_protocol(binary[:5]) is WireProtocol.REMOTING


def test_the_overlapping_prefix_is_told_apart_by_byte_twelve() -> None:
    # a native HELLO's bytes 4-7 (kind, flags, code 1) read as a remoting JSON header of 256
    # bytes, and a request id of 123 puts "{" in byte 8, where a JSON header starts
    native = _hello("x" * 222, request_id=0x7B)
    assert native[4:8] == struct.pack(">I", 256)
    assert native[8] == ord("{")
    assert sniff_protocol(native[:SNIFF_SIZE]) is WireProtocol.NATIVE
    header = b'{"code":105,' + b" " * 243 + b"}"
    remoting = struct.pack(">II", 4 + len(header), len(header)) + header
    assert remoting[4:9] == native[4:9]
    assert sniff_protocol(remoting[:SNIFF_SIZE]) is WireProtocol.REMOTING


def test_too_few_bytes_wait() -> None:
    assert sniff_protocol(_hello("c")[:8]) is None
    assert sniff_protocol(b"\x00\x00") is None
    assert sniff_protocol(b"") is None


def test_other_bytes_are_neither() -> None:
    assert sniff_protocol(b"GET / HTTP/1.1\r\n") is WireProtocol.UNKNOWN
    assert sniff_protocol(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc") is WireProtocol.UNKNOWN  # TLS
    assert sniff_protocol(b"PRI * HTTP/2.0\r\n") is WireProtocol.UNKNOWN
