"""RemotingCommand headers, checked against byte strings written out field by field from
RocketMQ's layouts: apache/rocketmq ``remoting/.../protocol/RemotingCommand.java`` (``encode``,
``markProtocolType``, the flag bits ``RPC_TYPE``/``RPC_ONEWAY``) and ``RocketMQSerializable.java``
(``rocketMQProtocolEncode``/``Decode``), whose own test ``RocketMQSerializableTest`` gives the
binary header's sizes (21 bytes bare, 34 with a 13-byte remark, 35 with one ext field
``key=value``)."""

from __future__ import annotations

import json
import struct

import pytest

from pocketmq.errors import ProtocolError
from pocketmq.protocol.remoting import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    RemotingCommand,
    RemotingFrameDecoder,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_command,
    request_command,
    response_to,
)
from pocketmq.protocol.remoting.command import decode_header, encode_header


def _decode_one(frame: bytes) -> RemotingCommand:
    [command] = RemotingFrameDecoder().feed(frame)
    return command


def _binary_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: bytes, fields: bytes
) -> bytes:
    # RocketMQSerializable.rocketMQProtocolEncode: code short, language byte, version short,
    # opaque int, flag int, remark (int length + bytes), ext fields (int length + entries)
    return (
        struct.pack(">hBhii", code, language, version, opaque, flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(fields))
        + fields
    )


def test_a_json_frame_is_length_type_and_header_length_then_header_then_body() -> None:
    command = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=7, ext_fields={"a": "g"})
    command.body = b"payload"
    frame = encode_command(command)
    total, word = struct.unpack_from(">II", frame)
    header = frame[8 : 8 + (word & 0xFFFFFF)]
    assert word >> 24 == SerializeType.JSON
    assert total == len(frame) - 4 == 4 + len(header) + len(b"payload")
    assert frame.endswith(b"payload")
    assert json.loads(header) == {
        "code": 310,
        "extFields": {"a": "g"},
        "flag": 0,
        "language": "JAVA",
        "opaque": 7,
        "version": 0,
    }


def test_a_java_json_request_decodes() -> None:
    # what fastjson writes for a 4.x client's SEND_MESSAGE_V2 (RemotingSerializable.encode of
    # the command; extFields from SendMessageRequestHeaderV2, serializeTypeCurrentRPC included)
    header = (
        b'{"code":310,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"1",'
        b'"f":"0","g":"1700000000000","h":"0","i":"TAGS\\u0001TagA\\u0002","j":"0",'
        b'"k":"false","m":"false"},"flag":0,"language":"JAVA","opaque":42,'
        b'"serializeTypeCurrentRPC":"JSON","version":401}'
    )
    frame = struct.pack(">II", 4 + len(header) + 5, len(header)) + header + b"hello"
    command = _decode_one(frame)
    assert (command.code, command.opaque, command.flag, command.version) == (310, 42, 0, 401)
    assert command.ext_fields["i"] == "TAGS\x01TagA\x02"
    assert command.ext_fields["g"] == "1700000000000"
    assert command.body == b"hello"
    assert not command.is_response
    assert not command.is_oneway
    assert command.serialize_type == SerializeType.JSON


def test_json_numbers_and_booleans_in_ext_fields_become_javas_text() -> None:
    # ali-ons copies its header object into extFields as is (lib/protocol/command/
    # remoting_command.js, makeCustomHeaderToNet): numbers and booleans arrive unquoted
    header = (
        b'{"code":310,"language":"JAVA","opaque":3,"flag":0,"version":121,'
        b'"extFields":{"e":1,"g":1700000000000,"k":false,"x":1.5,"y":2.0,"n":null,"s":"t"}}'
    )
    command = decode_header(SerializeType.JSON, header)
    assert command.ext_fields == {
        "e": "1",
        "g": "1700000000000",
        "k": "false",
        "x": "1.5",
        "y": "2",
        "s": "t",
    }


def test_a_language_given_by_number_is_named() -> None:
    command = decode_header(SerializeType.JSON, b'{"code":34,"language":9}')
    assert command.language == "GO"
    assert command.ext_fields == {}


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b"{",
        b"[]",
        b'{"opaque":1}',  # no code
        b'{"code":"x"}',
        b'{"code":2147483648}',  # beyond Java's int
        b'{"code":1,"extFields":[]}',
        b'{"code":1,"extFields":{"a":[1]}}',
        b'{"code":1,"remark":5}',
        b'\xff{"code":1}',
        # a field of the lenient kind (a number for the language) and then malformed JSON: the
        # strict decoder stops at the number, the lenient one must still refuse the rest
        b'{"code":105,"language":7,"opaque":}',
        b'{"code":105,"extFields":{"e":1},"flag":',
        b'{"code":105,"extFields":{"e":true}}}',
        b'{"language":0,"code":1\xff}',
    ],
)
def test_a_json_header_that_does_not_decode_is_a_protocol_error(header: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_header(SerializeType.JSON, header)


def test_the_binary_header_matches_rocketmqs_layout() -> None:
    command = RemotingCommand(
        103, opaque=9, flag=0, version=2333, serialize_type=SerializeType.ROCKETMQ
    )
    assert encode_header(command) == _binary_header(103, 0, 2333, 9, 0, b"", b"")
    assert len(encode_header(command)) == 21  # RocketMQSerializableTest, no remark, no fields
    command.remark = "Sample Remark"
    assert len(encode_header(command)) == 34
    command.remark = None
    command.ext_fields = {"key": "value"}
    # mapSerialize: short key length, key, int value length, value
    entry = struct.pack(">h", 3) + b"key" + struct.pack(">i", 5) + b"value"
    assert encode_header(command) == _binary_header(103, 0, 2333, 9, 0, b"", entry)
    assert len(encode_header(command)) == 35


def test_a_binary_frame_decodes_with_its_serialize_type_in_the_high_byte() -> None:
    entry = struct.pack(">h", 1) + b"a" + struct.pack(">i", 2) + b"PG"
    header = _binary_header(310, 13, 401, -5, FLAG_ONEWAY, "é".encode(), entry)
    frame = struct.pack(">II", 4 + len(header) + 3, 1 << 24 | len(header)) + header + b"abc"
    command = _decode_one(frame)
    assert (command.code, command.opaque, command.version) == (310, -5, 401)
    assert command.language == "NODE_JS"
    assert command.remark == "é"
    assert command.ext_fields == {"a": "PG"}
    assert command.is_oneway
    assert not command.is_response
    assert command.body == b"abc"
    assert command.serialize_type == SerializeType.ROCKETMQ
    assert encode_command(command) == frame


@pytest.mark.parametrize(
    "header",
    [
        b"\x00" * 20,  # shorter than the fixed part
        _binary_header(1, 0, 0, 0, 0, b"", b"")[:-1],
        _binary_header(1, 0, 0, 0, 0, b"xx", b"")[:17] + struct.pack(">i", 99) + b"xx" + bytes(4),
        _binary_header(1, 0, 0, 0, 0, b"", struct.pack(">h", 5) + b"ab"),
        _binary_header(1, 0, 0, 0, 0, b"", struct.pack(">h", -1) + b"ab" + bytes(4)),
        _binary_header(1, 0, 0, 0, 0, b"", struct.pack(">h", 1) + b"a" + struct.pack(">i", 9)),
        _binary_header(1, 0, 0, 0, 0, b"", struct.pack(">h", 1) + b"\xff" + bytes(4)),
        _binary_header(1, 0, 0, 0, 0, b"", b"") + b"trailing",
    ],
)
def test_a_binary_header_that_does_not_decode_is_a_protocol_error(header: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_header(SerializeType.ROCKETMQ, header)


def test_a_code_beyond_16_bits_cannot_travel_in_a_binary_header() -> None:
    # POP_MESSAGE is 200050: Java's writeShort would silently send 3442 instead
    command = RemotingCommand(RequestCode.POP_MESSAGE, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(ProtocolError, match="16 bits"):
        encode_command(command)
    command.serialize_type = SerializeType.JSON
    assert _decode_one(encode_command(command)).code == RequestCode.POP_MESSAGE


def test_a_response_echoes_its_requests_opaque_and_serialization() -> None:
    request = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=77, serialize_type=1)
    response = response_to(request, ResponseCode.PULL_NOT_FOUND, {"nextBeginOffset": "5"})
    assert (response.opaque, response.flag, response.serialize_type) == (77, FLAG_RESPONSE, 1)
    decoded = _decode_one(encode_command(response))
    assert decoded.is_response
    assert decoded.code == ResponseCode.PULL_NOT_FOUND
    assert decoded.ext_fields == {"nextBeginOffset": "5"}


def test_a_server_request_can_be_one_way() -> None:
    check = request_command(RequestCode.CHECK_TRANSACTION_STATE, 3, {"msgId": "X"}, oneway=True)
    decoded = _decode_one(encode_command(check))
    assert decoded.is_oneway
    assert not decoded.is_response
    assert decoded.flag == FLAG_ONEWAY


def test_a_null_remark_is_left_out_and_an_error_remark_kept() -> None:
    ok = encode_command(RemotingCommand(0, flag=FLAG_RESPONSE))
    assert b"remark" not in ok
    error = RemotingCommand(ResponseCode.TOPIC_NOT_EXIST, flag=1, remark="no route for t")
    assert _decode_one(encode_command(error)).remark == "no route for t"


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_text_utf8_cannot_carry_is_a_protocol_error(serialize_type: int) -> None:
    command = RemotingCommand(1, ext_fields={"k": "\ud800"}, serialize_type=serialize_type)
    with pytest.raises(ProtocolError, match="UTF-8"):
        encode_command(command)


@pytest.mark.parametrize("field", ["code", "opaque", "flag"])
def test_a_number_beyond_javas_int_is_not_encoded(field: str) -> None:
    command = RemotingCommand(1)
    setattr(command, field, 2**31)
    with pytest.raises(ProtocolError, match="Java int"):
        encode_command(command)
