"""The streaming remoting decoder: any split of the stream, limits checked before buffering,
one frame at a time on request, a partial frame abandoned without losing the stream (the frame
layout of apache/rocketmq ``RemotingCommand.encode``; the 16 MiB limit is ``NettyDecoder``'s
default ``frameMaxLength``)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.errors import ProtocolError
from pocketmq.protocol.remoting import (
    MAX_FRAME,
    AbandonedFrame,
    RemotingCommand,
    RemotingFrameDecoder,
    encode_command,
)


def _frame(opaque: int, body: bytes = b"", serialize_type: int = 0) -> bytes:
    command = RemotingCommand(11, opaque=opaque, ext_fields={"topic": "t"}, body=body)
    command.serialize_type = serialize_type
    return encode_command(command)


@settings(max_examples=150)
@given(
    st.lists(st.tuples(st.binary(max_size=200), st.sampled_from([0, 1])), min_size=1, max_size=12),
    st.data(),
)
def test_commands_survive_any_split_of_the_stream(
    frames: list[tuple[bytes, int]], data: st.DataObject
) -> None:
    stream = b"".join(_frame(n, body, kind) for n, (body, kind) in enumerate(frames))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = RemotingFrameDecoder()
    commands = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        commands.extend(decoder.feed(stream[previous:cut]))
        previous = cut
    assert [c.body for c in commands] == [body for body, _ in frames]
    assert [c.opaque for c in commands] == list(range(len(frames)))
    assert [c.serialize_type for c in commands] == [kind for _, kind in frames]
    assert decoder.buffered == 0


def test_an_oversize_frame_is_refused_from_its_length_alone() -> None:
    with pytest.raises(ProtocolError, match="outside"):
        RemotingFrameDecoder().feed(struct.pack(">I", MAX_FRAME))  # 4 + this > 16 MiB
    decoder = RemotingFrameDecoder(max_frame=1000)
    with pytest.raises(ProtocolError, match="outside"):
        decoder.feed(struct.pack(">II", 997, 10))


def test_the_largest_frame_is_accepted() -> None:
    decoder = RemotingFrameDecoder(max_frame=1000)
    frame = _frame(1, b"x" * 100)
    header_size = struct.unpack_from(">I", frame, 4)[0]
    body = b"y" * (1000 - 8 - header_size)
    frame = _frame(1, body)
    assert len(frame) == 1000
    [command] = decoder.feed(frame)
    assert command.body == body


@pytest.mark.parametrize(
    ("prefix", "match"),
    [
        (struct.pack(">II", 3, 0), "outside"),  # shorter than the header-length field
        (struct.pack(">II", 20, 2 << 24 | 4), "serialize type"),
        (struct.pack(">II", 20, 17), "exceeds its frame"),
        (struct.pack(">II", 1 << 20, 300 * 1024), "exceeds 262144"),
    ],
)
def test_a_bad_prefix_is_refused_before_the_frame_arrives(prefix: bytes, match: str) -> None:
    decoder = RemotingFrameDecoder()
    with pytest.raises(ProtocolError, match=match):
        decoder.feed(prefix)


def test_a_header_that_does_not_decode_fails_the_stream() -> None:
    header = b'{"code":"nope"}'
    with pytest.raises(ProtocolError):
        RemotingFrameDecoder().feed(struct.pack(">II", 4 + len(header), len(header)) + header)


def test_max_frames_leaves_the_rest_buffered() -> None:
    decoder = RemotingFrameDecoder()
    stream = b"".join(_frame(n) for n in range(1, 4))
    assert [c.opaque for c in decoder.feed(stream, max_frames=2)] == [1, 2]
    assert decoder.buffered == len(_frame(3))
    assert [c.opaque for c in decoder.feed(b"")] == [3]


def test_the_limit_may_change_between_frames() -> None:
    decoder = RemotingFrameDecoder(max_frame=200)
    stream = _frame(1) + _frame(2, b"z" * 500)
    [first] = decoder.feed(stream, max_frames=1)
    decoder.max_frame = 2000
    [second] = decoder.feed(b"")
    assert (first.opaque, second.opaque, len(second.body)) == (1, 2, 500)


def test_an_abandoned_frame_is_answered_by_its_opaque_and_skipped() -> None:
    decoder = RemotingFrameDecoder()
    big = _frame(7, b"b" * 5000)
    assert decoder.feed(big[:3000]) == []
    abandoned = decoder.abandon_partial()
    assert isinstance(abandoned, AbandonedFrame)
    assert abandoned.command.opaque == 7
    assert abandoned.command.ext_fields == {"topic": "t"}
    assert abandoned.body_size == 5000
    assert decoder.buffered == 0
    rest = big[3000:] + _frame(8, b"ok")
    commands = decoder.feed(rest[:100]) + decoder.feed(rest[100:1900]) + decoder.feed(rest[1900:])
    assert [(c.opaque, c.body) for c in commands] == [(8, b"ok")]


def test_a_partial_frame_s_header_is_read_without_dropping_the_frame() -> None:
    decoder = RemotingFrameDecoder()
    frame = _frame(5, b"p" * 300)
    assert decoder.feed(frame[:40]) == []
    assert decoder.partial_header() is None  # the header is not complete yet
    assert decoder.feed(frame[40:200]) == []
    partial = decoder.partial_header()
    assert partial is not None
    assert (partial.command.opaque, partial.body_size) == (5, 300)
    assert decoder.buffered == 200  # nothing dropped: the frame goes on
    [command] = decoder.feed(frame[200:])
    assert (command.opaque, command.body) == (5, b"p" * 300)
    assert decoder.partial_header() is None


def test_a_partial_header_that_does_not_decode_fails_the_stream() -> None:
    decoder = RemotingFrameDecoder()
    header = b"{not json" + b" " * 7
    frame = struct.pack(">II", 4 + len(header) + 50, len(header)) + header
    assert decoder.feed(frame) == []
    with pytest.raises(ProtocolError, match="JSON"):
        decoder.partial_header()
    with pytest.raises(ProtocolError, match="JSON"):
        decoder.feed(b"x" * 50)


def test_nothing_to_abandon_before_the_header_is_complete() -> None:
    decoder = RemotingFrameDecoder()
    frame = _frame(1, b"x" * 100)
    decoder.feed(frame[:12])
    assert decoder.abandon_partial() is None
    assert decoder.buffered == 12
    [command] = decoder.feed(frame[12:])
    assert command.opaque == 1


def test_frames_before_a_malformed_one_are_served_then_the_stream_fails() -> None:
    decoder = RemotingFrameDecoder()
    garbage = struct.pack(">II", 20, 2 << 24 | 4) + bytes(16)  # serialize type 2
    commands = decoder.feed(_frame(1) + _frame(2) + garbage + _frame(3))
    assert [c.opaque for c in commands] == [1, 2]
    with pytest.raises(ProtocolError, match="serialize type"):
        decoder.feed(b"")
    with pytest.raises(ProtocolError, match="serialize type"):
        decoder.feed(_frame(4))
    assert decoder.abandon_partial() is None
