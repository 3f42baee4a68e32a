"""The decoder's limits (docs/protocol.md "Limits"): a size limit that may change between
frames, one frame at a time on request, and a partial frame that can be abandoned without
losing the framing."""

from __future__ import annotations

import pytest

from pocketmq.errors import ProtocolError
from pocketmq.protocol import FrameDecoder, FrameHeader, FrameKind, decode_body, encode_frame
from pocketmq.protocol.structs import GetRouteRequest, encode_body


def _frame(request_id: int, size: int) -> bytes:
    return encode_frame(FrameKind.REQUEST, 61, request_id, b"x" * size)


def test_the_limit_applies_to_headers_decoded_after_it_changes() -> None:
    decoder = FrameDecoder(max_body=100)
    stream = _frame(1, 10) + _frame(2, 1000)
    [first] = decoder.feed(stream, max_frames=1)
    assert first.request_id == 1
    decoder.max_body = 2000
    [second] = decoder.feed(b"")
    assert second.request_id == 2
    with pytest.raises(ProtocolError, match=r"outside 8\.\.108"):
        FrameDecoder(max_body=100).feed(stream)


def test_an_abandoned_frame_is_skipped_and_the_next_one_decoded() -> None:
    decoder = FrameDecoder()
    big = _frame(7, 5000)
    assert decoder.feed(big[:3000]) == []
    assert decoder.buffered == 3000
    assert decoder.abandon_partial() == FrameHeader(FrameKind.REQUEST, 61, 7, 5000)
    assert decoder.buffered == 0
    rest = big[3000:] + _frame(8, 3)
    # the rest of the abandoned frame may arrive in any pieces
    frames = decoder.feed(rest[:100]) + decoder.feed(rest[100:2000]) + decoder.feed(rest[2000:])
    assert [(f.request_id, f.body) for f in frames] == [(8, b"xxx")]


def test_nothing_to_abandon_without_a_complete_header() -> None:
    decoder = FrameDecoder()
    decoder.feed(_frame(1, 10)[:5])
    assert decoder.abandon_partial() is None
    assert decoder.buffered == 5


def test_invalid_utf8_in_a_string_is_a_protocol_error() -> None:
    body = encode_body(GetRouteRequest("abc")).replace(b"abc", b"\xff\xfe\xfd")
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_body(body, GetRouteRequest)


def test_max_frames_leaves_the_rest_buffered() -> None:
    decoder = FrameDecoder()
    stream = b"".join(_frame(n, 4) for n in range(1, 4))
    assert [f.request_id for f in decoder.feed(stream, max_frames=2)] == [1, 2]
    assert decoder.buffered == len(_frame(3, 4))
    assert [f.request_id for f in decoder.feed(b"")] == [3]
