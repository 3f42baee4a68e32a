"""The sans-IO protocol, tested by feeding bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.errors import ProtocolError
from pocketmq.protocol import (
    MAX_FRAME_BODY,
    FrameDecoder,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol.structs import InboundMessage, SendRequest


def test_a_frame_round_trips() -> None:
    body = encode_body(SendRequest(messages=[InboundMessage(topic="t", body=b"x")]))
    raw = encode_frame(FrameKind.REQUEST, RequestCode.SEND, 7, body)
    [frame] = FrameDecoder().feed(raw)
    assert (frame.kind, frame.code, frame.request_id) == (0, RequestCode.SEND, 7)
    decoded = decode_body(frame.body, SendRequest)
    assert decoded.messages[0].topic == "t"
    assert decoded.messages[0].queue_id == -1


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=20), st.data())
def test_frames_survive_any_split_of_the_stream(bodies: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(FrameKind.RESPONSE, 0, n, body) for n, body in enumerate(bodies))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    frames = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        frames.extend(decoder.feed(stream[previous:cut]))
        previous = cut
    assert [f.body for f in frames] == bodies
    assert [f.request_id for f in frames] == list(range(len(bodies)))
    assert decoder.buffered == 0


def test_an_oversize_frame_is_rejected_before_buffering() -> None:
    header = struct.pack("<IBBHI", MAX_FRAME_BODY + 9, 0, 0, 10, 1)
    with pytest.raises(ProtocolError, match="outside"):
        FrameDecoder().feed(header)


def test_a_too_short_length_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack("<IBBHI", 3, 0, 0, 10, 1))


def test_an_unknown_kind_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="kind"):
        FrameDecoder().feed(struct.pack("<IBBHI", 8, 9, 0, 10, 1))


def test_http_garbage_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")


def test_encoding_refuses_an_oversize_body() -> None:
    with pytest.raises(ProtocolError):
        encode_frame(FrameKind.REQUEST, 10, 1, b"x" * (MAX_FRAME_BODY + 1))


def test_wrong_types_name_the_structure() -> None:
    bad = encode_body(SendRequest(messages=[]))[:-1] + b"\x01"  # messages is not a list
    with pytest.raises(ProtocolError, match="SendRequest"):
        decode_body(bad, SendRequest)
    with pytest.raises(ProtocolError, match="malformed"):
        decode_body(b"\xc1", SendRequest)
