"""Issue 14, at the native edge of a real broker: bad values get a typed error of their own,
responses that grow with the data are paged, and unauthenticated connections cannot grow the
broker's memory."""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import time
from collections.abc import Callable

import pytest

from pocketmq import Message
from pocketmq.client import Admin, Producer
from pocketmq.client.connection import ClientConnection, connect
from pocketmq.errors import Code, MessageIllegalError
from pocketmq.protocol import (
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

from ..scratch import scratch_dir
from .conftest import FAST_BROKER, create

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def _rss_kib(broker: BrokerProcess) -> int:
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _hello() -> bytes:
    return encode_frame(
        FrameKind.REQUEST, RequestCode.HELLO, 1, encode_body(w.HelloRequest(PROTOCOL_VERSION, "r"))
    )


def _socket(broker: BrokerProcess) -> socket.socket:
    host, port = broker.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _frames_until(sock: socket.socket, last_id: int) -> dict[int, object]:
    decoder = FrameDecoder()
    by_id: dict[int, object] = {}
    while last_id not in by_id:
        data = sock.recv(1 << 20)
        assert data, f"closed; got answers to {sorted(by_id)[:5]}..."
        for frame in decoder.feed(data):
            by_id[frame.request_id] = frame
    return by_id


async def _connection(broker: BrokerProcess) -> ClientConnection:
    return await connect(broker.address, "edge-test", timeout=5)


def test_invalid_utf8_is_a_protocol_error_not_a_traceback(broker: BrokerProcess) -> None:
    good = encode_body(w.GetRouteRequest("abc"))
    bad = good.replace(b"abc", b"\xff\xfe\xfd")
    log_before = len(broker.log())
    with _socket(broker) as sock:
        stream = _hello() + b"".join(
            encode_frame(FrameKind.REQUEST, RequestCode.GET_ROUTE, n, bad) for n in range(2, 2002)
        )
        sock.sendall(
            stream + encode_frame(FrameKind.REQUEST, RequestCode.LIST_TOPICS, 2002, b"\x90")
        )
        answers = _frames_until(sock, 2002)
    codes = {answers[n].code for n in range(2, 2002)}  # type: ignore[attr-defined]
    assert codes == {Code.PROTOCOL_ERROR}
    remark = decode_body(answers[2].body, w.ErrorBody).remark  # type: ignore[attr-defined]
    assert "UTF-8" in remark
    assert answers[2002].code == Code.SUCCESS  # type: ignore[attr-defined]
    written = broker.log()[log_before:]
    assert "Traceback" not in written
    assert len(written) < 2000, written[:2000]


async def test_out_of_range_fields_fail_alone_in_a_batch(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("t")
    await create(broker.address, topic=topic)
    connection = await _connection(broker)
    try:
        messages = [
            w.InboundMessage(topic, b"good", {"UNIQ_KEY": "edge-good-" + topic}),
            w.InboundMessage(topic, b"flags", flags=2**40),
            w.InboundMessage(topic, b"born", born_timestamp=-1),
            w.InboundMessage(topic, b"born", born_timestamp=2**64 - 1),
            w.InboundMessage(topic, b"prop", {"": "empty name"}),
            w.InboundMessage(topic, b"good too"),
        ]
        reply = await connection.request(
            RequestCode.SEND, w.SendRequest(messages), w.SendResponse, 5
        )
    finally:
        connection.close()
    codes = [r.code for r in reply.results]
    assert codes == [0, Code.MESSAGE_ILLEGAL, Code.MESSAGE_ILLEGAL, Code.MESSAGE_ILLEGAL,
                     Code.MESSAGE_ILLEGAL, 0]  # fmt: skip
    assert "flags" in reply.results[1].remark
    assert "born_timestamp" in reply.results[2].remark
    assert "property name" in reply.results[4].remark
    stored = [r for r in reply.results if r.code == 0]
    assert len({(r.queue_id, r.queue_offset) for r in stored}) == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retry_multiplier", math.nan),
        ("retry_multiplier", 1e308),
        ("retry_multiplier", math.inf),
        ("retry_delays_ms", [1000, -5]),
        ("retry_initial_ms", 2**62),
        ("max_retries", 2**40),
    ],
)
async def test_an_unworkable_retry_policy_is_refused_at_creation(
    broker: BrokerProcess, names: Callable[[str], str], field: str, value: object
) -> None:
    group = names("g")
    spec = w.GroupSpec(group, retry_initial_ms=1000)
    spec = w.GroupSpec(**{**{f: getattr(spec, f) for f in spec.__struct_fields__}, field: value})
    connection = await _connection(broker)
    try:
        with pytest.raises(MessageIllegalError, match=r"retry|max_retries"):
            await connection.request(RequestCode.CREATE_GROUP, spec, w.Empty, 5)
        groups = await connection.request(
            RequestCode.LIST_GROUPS, w.Empty(), w.ListGroupsResponse, 5
        )
    finally:
        connection.close()
    assert group not in {g.name for g in groups.groups}


async def test_a_key_query_larger_than_a_frame_is_paged(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("t")
    await create(broker.address, topic=topic)
    async with Producer(servers=broker.address) as producer:
        for n in range(20):
            await producer.send(Message(topic=topic, body=bytes([n]) * MiB, keys=("big",)))
    connection = await _connection(broker)
    try:
        first = connection.send_request(
            RequestCode.QUERY_MESSAGE,
            w.QueryMessageRequest(topic=topic, key="big", max_count=32),
            w.QueryMessageResponse,
        )
        behind = connection.send_request(RequestCode.LIST_TOPICS, w.Empty(), w.ListTopicsResponse)
        page = await first
        assert page.more
        assert 0 < len(page.messages) < 20
        assert topic in {t.name for t in (await behind).topics}
    finally:
        connection.close()
    async with Admin(servers=broker.address) as admin:
        found = await admin.query_by_key(topic, "big", max_count=32)
    assert sorted(m.body[0] for m in found) == list(range(20))


async def test_a_pop_never_exceeds_a_frame(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=8)
    async with Producer(servers=broker.address) as producer:
        for n in range(32):
            await producer.send(Message(topic=topic, body=bytes([n]) * MiB))
    connection = await _connection(broker)
    seen: list[int] = []
    try:
        for _ in range(10):
            reply = await connection.request(
                RequestCode.POP,
                w.PopRequest(group, topic, max_count=32, invisible_ms=60_000),
                w.PopResponse,
                10,
            )
            assert sum(len(m.body) for m in reply.messages) < 16 * MiB
            seen += [m.body[0] for m in reply.messages]
            if len(seen) >= 32:
                break
    finally:
        connection.close()
    assert sorted(seen) == list(range(32))


def _offer_partial_frames(broker: BrokerProcess, count: int, *, greet: bool) -> int:
    """Open ``count`` connections that each send 8 MiB of a 16 MiB frame and stop; returns how
    many MiB the broker's RSS grew meanwhile."""
    before = _rss_kib(broker)
    header = struct.pack("<IBBHI", 16 * MiB, 0, 0, RequestCode.SEND, 2)
    partial = header + b"\x00" * (8 * MiB)
    sockets = []
    try:
        for _ in range(count):
            sock = _socket(broker)
            sockets.append(sock)
            with contextlib.suppress(OSError):  # the broker may close it at the header
                sock.sendall((_hello() if greet else b"") + partial)
        time.sleep(0.5)
        return (_rss_kib(broker) - before) // 1024
    finally:
        for sock in sockets:
            sock.close()


def test_unauthenticated_connections_cannot_buffer_large_frames(broker: BrokerProcess) -> None:
    """The issue's measurement: 30 connections each holding a 16 MiB partial frame took the RSS
    from 64 to 576 MiB. Before HELLO a frame over 64 KiB is refused at its header."""
    grown = _offer_partial_frames(broker, 30, greet=False)
    assert grown < 32, f"RSS grew by {grown} MiB"


def test_partial_frames_share_the_memory_budget(tmp_path_factory: pytest.TempPathFactory) -> None:
    """After HELLO, the bytes held for partial frames across connections stay within
    ``max_buffered_bytes`` (here 16 MiB of the 240 MiB offered)."""
    config = {**FAST_BROKER, "server": {"max_buffered_bytes": 16 * MiB}}
    with (
        scratch_dir(tmp_path_factory, "rss") as scratch,
        BrokerProcess(scratch, config=config, grpc_port=None) as broker,
    ):
        grown = _offer_partial_frames(broker, 30, greet=True)
        assert grown < 48, f"RSS grew by {grown} MiB"


async def test_pulls_and_browses_stay_within_a_frame(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    """The other responses that grow with the data: 20 MiB in one queue come back in bounded
    pieces, and reading on from where each stopped loses nothing."""
    topic, group = names("t"), names("g")
    await create(broker.address, topic=topic, group=group, queues=1)
    async with Producer(servers=broker.address) as producer:
        for n in range(20):
            await producer.send(Message(topic=topic, body=bytes([n]) * MiB))
    connection = await _connection(broker)
    pulled: list[int] = []
    browsed: list[int] = []
    try:
        offset = 0
        while len(pulled) < 20:
            reply = await connection.request(
                RequestCode.PULL, w.PullRequest(group, topic, 0, offset, 32), w.PullResponse, 10
            )
            assert sum(len(m.body) for m in reply.messages) <= 4 * MiB
            pulled += [m.body[0] for m in reply.messages]
            offset = reply.next_offset
        offset = 0
        while len(browsed) < 20:
            page = await connection.request(
                RequestCode.BROWSE, w.BrowseRequest(topic, 0, offset, 1024),
                w.QueryMessageResponse, 10,
            )  # fmt: skip
            assert sum(len(m.body) for m in page.messages) <= 4 * MiB
            browsed += [m.body[0] for m in page.messages]
            offset = page.messages[-1].queue_offset + 1
    finally:
        connection.close()
    assert pulled == browsed == list(range(20))
