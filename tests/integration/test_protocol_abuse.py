"""Garbage on the wire: the offending connection gets an error frame and is closed; everyone
else keeps being served."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import pytest

from pocketmq import Message
from pocketmq.client import Producer
from pocketmq.errors import Code
from pocketmq.protocol import (
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from .conftest import create

pytestmark = pytest.mark.integration


def _connect(broker: BrokerProcess) -> socket.socket:
    host, port = broker.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def _read_frames(sock: socket.socket) -> tuple[list[w.ErrorBody | bytes], bool]:
    """Frames until the server closes the connection (or 2 s of silence)."""
    decoder = FrameDecoder()
    frames = []
    sock.settimeout(2)
    closed = False
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                closed = True
                break
            frames += decoder.feed(data)
    except TimeoutError:
        pass
    return frames, closed


def _hello() -> bytes:
    return encode_frame(
        FrameKind.REQUEST,
        RequestCode.HELLO,
        1,
        encode_body(w.HelloRequest(PROTOCOL_VERSION, "raw")),
    )


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n",
        struct.pack("<IBBHI", MAX_FRAME_BODY + 100, 0, 0, 10, 1),
        struct.pack("<IBBHI", 2, 0, 0, 10, 1),
        struct.pack("<IBBHI", 8, 7, 0, 10, 1),
        b"\x00" * 3 + b"\xff" * 40,
    ],
    ids=["http", "oversize", "short-length", "bad-kind", "noise"],
)
async def test_garbage_is_answered_and_closed_while_others_are_served(
    broker: BrokerProcess, names: Callable[[str], str], garbage: bytes
) -> None:
    topic = names("t")
    await create(broker.address, topic=topic)
    async with Producer(servers=broker.address) as producer:
        await producer.send(Message(topic=topic, body=b"before"))
        with _connect(broker) as sock:
            sock.sendall(garbage)
            frames, closed = _read_frames(sock)
        assert closed
        assert frames, "an error frame comes before the close"
        assert frames[-1].code == Code.PROTOCOL_ERROR
        assert decode_body(frames[-1].body, w.ErrorBody).remark
        result = await producer.send(Message(topic=topic, body=b"after"))
        assert result.queue_offset >= 0


def test_requests_before_hello_are_refused(broker: BrokerProcess) -> None:
    with _connect(broker) as sock:
        sock.sendall(
            encode_frame(FrameKind.REQUEST, RequestCode.LIST_TOPICS, 5, encode_body(w.Empty()))
        )
        frames, closed = _read_frames(sock)
    assert closed
    assert frames[0].code == Code.PROTOCOL_ERROR
    assert "HELLO" in decode_body(frames[0].body, w.ErrorBody).remark


def test_a_body_of_the_wrong_type_is_an_error_but_the_connection_stays(
    broker: BrokerProcess,
) -> None:
    with _connect(broker) as sock:
        sock.sendall(_hello())
        bad = encode_body(w.GetRouteRequest(topic=12345))  # type: ignore[arg-type]
        sock.sendall(encode_frame(FrameKind.REQUEST, RequestCode.GET_ROUTE, 2, bad))
        sock.sendall(
            encode_frame(FrameKind.REQUEST, RequestCode.LIST_TOPICS, 3, encode_body(w.Empty()))
        )
        sock.sendall(encode_frame(FrameKind.REQUEST, 999, 4, b""))
        frames, closed = _read_frames(sock)
    assert not closed
    by_id = {f.request_id: f for f in frames}
    assert by_id[1].code == Code.SUCCESS
    assert by_id[2].code == Code.PROTOCOL_ERROR
    assert "GetRouteRequest" in decode_body(by_id[2].body, w.ErrorBody).remark
    assert by_id[3].code == Code.SUCCESS
    assert by_id[4].code == Code.REQUEST_CODE_NOT_SUPPORTED


def test_pipelined_requests_are_all_answered(broker: BrokerProcess) -> None:
    with _connect(broker) as sock:
        stream = _hello() + b"".join(
            encode_frame(FrameKind.REQUEST, RequestCode.LIST_TOPICS, n, encode_body(w.Empty()))
            for n in range(2, 202)
        )
        sock.sendall(stream)
        frames, _ = _read_frames(sock)
    assert sorted(f.request_id for f in frames) == list(range(1, 202))
    assert all(f.code == Code.SUCCESS for f in frames)
