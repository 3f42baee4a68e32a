"""Requests a handler asks to be done together (``Joined``): the ones one read brings are run in
one call, in arrival order, never across a request of another kind, at most ``JOIN_LIMIT`` at a
time, and each is answered on its own (docs/design.md "Sending")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from pocketmq.errors import Code, MessageIllegalError
from pocketmq.protocol import (
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
    FrameKind,
    RequestCode,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.structs import decode_body
from pocketmq.server.native.connection import JOIN_LIMIT, HandlerTable, Joined, ServerConnection
from pocketmq.server.native.tcp import FrameServer
from tests.server.conftest import RawClient

#: what the handlers did, in order: a list of topics per joined run, a topic per route request
Log = list[Any]


def _handlers(log: Log) -> HandlerTable:
    def hello(conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
        conn.greeted = True
        return w.HelloResponse(PROTOCOL_VERSION, "t", "toy", "broker", MAX_FRAME_BODY, 1024, 60_000)

    def run(topics: list[str]) -> Sequence[object]:
        log.append(list(topics))
        if "boom" in topics:
            raise RuntimeError("the runner broke")
        return [
            MessageIllegalError(f"{t} is bad")
            if t == "bad"
            else w.RouteResponse(t, "normal", [], [])
            for t in topics
        ]

    def joined(conn: ServerConnection, req: w.GetRouteRequest) -> Joined:
        return Joined(run, req.topic)

    def alone(conn: ServerConnection, req: w.QueryOffsetRequest) -> w.Empty:
        log.append(req.topic)
        return w.Empty()

    return {
        RequestCode.HELLO: hello,
        RequestCode.GET_ROUTE: joined,
        RequestCode.QUERY_OFFSET: alone,
    }


@pytest.fixture
async def served() -> AsyncIterator[tuple[RawClient, Log]]:
    log: Log = []
    server = FrameServer(_handlers(log))
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    client = RawClient(reader, writer)
    assert (await client.hello()).code == Code.SUCCESS
    try:
        yield client, log
    finally:
        client.close()
        await server.close()


def _joined(topic: str, request_id: int) -> bytes:
    body = encode_body(w.GetRouteRequest(topic))
    return encode_frame(FrameKind.REQUEST, RequestCode.GET_ROUTE, request_id, body)


def _alone(topic: str, request_id: int) -> bytes:
    body = encode_body(w.QueryOffsetRequest("g", topic, 0))
    return encode_frame(FrameKind.REQUEST, RequestCode.QUERY_OFFSET, request_id, body)


async def test_one_read_runs_together_in_order_and_each_request_is_answered_alone(
    served: tuple[RawClient, Log],
) -> None:
    client, log = served
    await client.send(
        _joined("a", 10)
        + _joined("b", 11)
        + _alone("r", 12)
        + _joined("c", 13)
        + _joined("bad", 14)
    )
    answers = {n: await client.answer(n) for n in (10, 11, 12, 13, 14)}
    # the request of another kind ran between the two groups, as it arrived
    assert log == [["a", "b"], "r", ["c", "bad"]]
    for n, topic in ((10, "a"), (11, "b"), (13, "c")):
        assert answers[n].code == Code.SUCCESS
        assert decode_body(answers[n].body, w.RouteResponse).topic == topic
    assert answers[12].code == Code.SUCCESS
    assert answers[14].code == Code.MESSAGE_ILLEGAL
    assert "bad is bad" in decode_body(answers[14].body, w.ErrorBody).remark


async def test_a_broken_run_fails_its_requests_and_the_connection_serves_on(
    served: tuple[RawClient, Log],
) -> None:
    client, log = served
    await client.send(_joined("x", 20) + _joined("boom", 21))
    for n in (20, 21):
        answer = await client.answer(n)
        assert answer.code == Code.SYSTEM_ERROR
        assert "the runner broke" in decode_body(answer.body, w.ErrorBody).remark
    await client.send(_joined("after", 22))
    assert (await client.answer(22)).code == Code.SUCCESS
    assert log[-1] == ["after"]


async def test_at_most_join_limit_requests_run_in_one_call(served: tuple[RawClient, Log]) -> None:
    client, log = served
    count = JOIN_LIMIT + 5
    await client.send(b"".join(_joined(f"t{n}", 100 + n) for n in range(count)))
    for n in range(count):
        assert (await client.answer(100 + n)).code == Code.SUCCESS
    runs = [entry for entry in log if isinstance(entry, list)]
    assert [t for run in runs for t in run] == [f"t{n}" for n in range(count)]
    assert max(len(run) for run in runs) == JOIN_LIMIT  # the frames fit one read: split by the cap


async def test_a_bad_body_after_good_ones_is_refused_with_its_reason(
    served: tuple[RawClient, Log],
) -> None:
    """The connection keeps a decoder per request code once one decoded; a body it cannot decode
    is still answered with decode_body's reason, alone, and the connection serves on."""
    client, log = served
    await client.send(_joined("first", 30))
    assert (await client.answer(30)).code == Code.SUCCESS
    bad = b"\xc1"  # a byte MessagePack never uses
    await client.send(encode_frame(FrameKind.REQUEST, RequestCode.GET_ROUTE, 31, bad))
    answer = await client.answer(31)
    assert answer.code != Code.SUCCESS
    assert "GetRouteRequest" in decode_body(answer.body, w.ErrorBody).remark
    await client.send(_joined("after", 32))
    assert (await client.answer(32)).code == Code.SUCCESS
    assert log[-1] == ["after"]
