"""An unauthenticated connection must not hold the server's memory, time or connection slots.
Each limit of ``pocketmq.server.native.limits`` is driven through a real socket."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import pytest

from pocketmq.client.connection import connect
from pocketmq.errors import Code, TooManyRequestsError
from pocketmq.protocol import (
    MAX_FRAME_BODY,
    PROTOCOL_VERSION,
    FrameKind,
    RequestCode,
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.server.namesrv.link import NameServerLink

from .conftest import StartToy

MiB = 1024 * 1024


def _header(body_size: int, request_id: int, code: int = RequestCode.GET_ROUTE) -> bytes:
    return struct.pack("<IBBHI", body_size + 8, FrameKind.REQUEST, 0, code, request_id)


def _remark(frame: object) -> str:
    return decode_body(frame.body, w.ErrorBody).remark  # type: ignore[attr-defined]


async def test_a_large_frame_before_hello_is_refused_at_once(start_toy: StartToy) -> None:
    async with start_toy() as toy:
        client = await toy.connect()
        await client.send(_header(MiB, 1, RequestCode.HELLO) + b"x" * 1000)
        frames = await client.until_closed(timeout=2)
        assert frames[-1].code == Code.PROTOCOL_ERROR
        assert "outside" in _remark(frames[-1])
        assert toy.server.budget.used == 0


async def test_hello_then_a_full_size_frame_in_one_write_is_served(start_toy: StartToy) -> None:
    """The pre-handshake limit applies to the frames before HELLO only, also when a client
    pipelines its first request behind it."""
    async with start_toy() as toy:
        client = await toy.connect()
        hello = encode_frame(
            FrameKind.REQUEST,
            RequestCode.HELLO,
            1,
            encode_body(w.HelloRequest(PROTOCOL_VERSION, "raw")),
        )
        big = encode_frame(
            FrameKind.REQUEST, RequestCode.GET_ROUTE, 2, encode_body(w.GetRouteRequest("t" * MiB))
        )
        await client.send(hello + big)
        assert (await client.answer(1)).code == Code.SUCCESS
        answer = await client.answer(2)
        assert answer.code == Code.SUCCESS
        assert decode_body(answer.body, w.RouteResponse).topic == "t" * MiB


async def test_a_client_that_never_says_hello_is_closed(start_toy: StartToy) -> None:
    async with start_toy(hello_timeout=5) as toy:
        silent = await toy.connect()
        greeted = await toy.connect()
        assert (await greeted.hello()).code == Code.SUCCESS
        await asyncio.sleep(0.05)
        toy.clock.now += 4.9
        toy.server.sweep()
        await silent.read_some(0.1)
        assert not silent.closed
        toy.clock.now += 0.2
        toy.server.sweep()
        frames = await silent.until_closed()
        assert frames[-1].code == Code.PROTOCOL_ERROR
        assert "no HELLO within 5 s" in _remark(frames[-1])
        await greeted.request(RequestCode.GET_ROUTE, w.GetRouteRequest("still"), 2)
        assert (await greeted.answer(2)).code == Code.SUCCESS


async def test_idle_connections_are_closed_but_not_during_a_long_poll(
    start_toy: StartToy,
) -> None:
    async with start_toy(idle_timeout=60) as toy:
        idle = await toy.connect()
        polling = await toy.connect()
        for client in (idle, polling):
            assert (await client.hello()).code == Code.SUCCESS
        await polling.request(RequestCode.PULL, w.PullRequest("g", "t", 0, 0), 2)
        await asyncio.sleep(0.05)
        toy.clock.now += 61
        toy.server.sweep()
        await idle.until_closed()
        await polling.read_some(0.1)
        assert not polling.closed, "a connection waiting for an answer is not idle"
        toy.toy.release.set()
        assert (await polling.answer(2)).code == Code.SUCCESS
        toy.clock.now += 30
        toy.server.sweep()
        await polling.read_some(0.1)
        assert not polling.closed, "idle time counts from the last answer"
        toy.clock.now += 31
        toy.server.sweep()
        await polling.until_closed()


async def test_connections_past_the_cap_are_told_why(start_toy: StartToy) -> None:
    async with start_toy(max_connections=2) as toy:
        first = await toy.connect()
        assert (await first.hello()).code == Code.SUCCESS
        second = await toy.connect()  # one at a time: a quarter of 2 may be in the handshake
        assert (await second.hello()).code == Code.SUCCESS
        third = await toy.connect()
        frames = await third.until_closed()
        assert [(f.code, f.request_id) for f in frames] == [(Code.TOO_MANY_REQUESTS, 0)]
        assert "max_connections 2" in _remark(frames[0])
        # the SDK reports the broker's reason, typed, instead of "connection lost"
        with pytest.raises(TooManyRequestsError, match="max_connections 2"):
            await connect(toy.server.address, "sdk", timeout=2)
        first.close()
        await asyncio.sleep(0.1)
        again = await connect(toy.server.address, "sdk", timeout=2)
        assert again.hello is not None
        again.close()


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``condition`` holds: megabytes cross loopback in well under a second, but a
    loaded machine once took longer than a fixed 0.2 s wait allowed."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_partly_received_frames_share_one_memory_budget(start_toy: StartToy) -> None:
    """Frames still arriving may hold at most ``max_buffered_bytes`` across all connections; the
    request that would pass it is refused, its bytes skipped, and its connection stays usable."""
    async with start_toy(max_buffered_bytes=MAX_FRAME_BODY) as toy:
        first, second = await toy.connect(), await toy.connect()
        for client in (first, second):
            assert (await client.hello()).code == Code.SUCCESS
        size = 10 * MiB
        body = w.encode_body(w.GetRouteRequest("a" * (size - 6)))
        assert len(body) == size
        await first.send(_header(size, 2) + body[: 9 * MiB])
        await _until(lambda: toy.server.budget.used >= 9 * MiB)
        await second.send(_header(size, 7) + body[: 9 * MiB])
        refused = await second.answer(7)
        assert refused.code == Code.TOO_MANY_REQUESTS
        assert "back off and retry" in _remark(refused)
        # the rest of the refused frame is skipped: the next request is read normally
        await second.send(body[9 * MiB :])
        await second.request(RequestCode.GET_ROUTE, w.GetRouteRequest("after"), 8)
        assert decode_body((await second.answer(8)).body, w.RouteResponse).topic == "after"
        # the first connection's frame completes and is served
        await first.send(body[9 * MiB :])
        served = await first.answer(2)
        assert served.code == Code.SUCCESS
        assert decode_body(served.body, w.RouteResponse).topic == "a" * (size - 6)
        assert toy.server.budget.used == 0
        # a connection that closes mid-frame gives its bytes back
        await first.send(_header(size, 3) + body[: 4 * MiB])
        await _until(lambda: toy.server.budget.used >= 4 * MiB)
        first.close()
        await _until(lambda: toy.server.budget.used == 0)


async def test_an_oversize_response_fails_alone(start_toy: StartToy) -> None:
    """A response that cannot fit in a frame is answered MESSAGE_TOO_LARGE; the connection and
    the requests pipelined behind it carry on."""
    async with start_toy() as toy:
        toy.toy.echo_body = lambda topic: w.RouteResponse(
            topic,
            "normal",
            [w.BrokerAddress("b" * 1000, "x")] * (20_000 if topic == "huge" else 1),
            [],
        )
        client = await toy.connect()
        assert (await client.hello()).code == Code.SUCCESS
        await client.request(RequestCode.GET_ROUTE, w.GetRouteRequest("huge"), 2)
        await client.request(RequestCode.GET_ROUTE, w.GetRouteRequest("small"), 3)
        too_large = await client.answer(2)
        assert too_large.code == Code.MESSAGE_TOO_LARGE
        assert "frame limit" in _remark(too_large)
        assert (await client.answer(3)).code == Code.SUCCESS
        assert not client.closed


async def test_the_sdk_closes_its_idle_connections_before_the_server_would(
    start_toy: StartToy,
) -> None:
    """The HELLO reply carries the server's idle timeout; the SDK closes a connection unused
    for half of it (the server's own sweep never runs here: its clock is fake)."""
    async with start_toy(idle_timeout=0.4) as toy:
        connection = await connect(toy.server.address, "sdk", timeout=2)
        assert connection.hello is not None
        assert connection.hello.idle_timeout_ms == 400
        waiting = connection.send_request(RequestCode.PULL, w.PullRequest("g", "t", 0, 0), None)
        await asyncio.sleep(0.5)
        assert connection.is_open, "a connection with a request in flight is not idle"
        toy.toy.release.set()
        await waiting
        await asyncio.sleep(0.1)
        assert connection.is_open
        await asyncio.sleep(0.35)
        assert not connection.is_open


async def test_the_name_server_link_reconnects_after_an_idle_close(start_toy: StartToy) -> None:
    async with start_toy(idle_timeout=30) as toy:
        link = NameServerLink(toy.server.address, "broker:test")
        try:
            route = await link.call(RequestCode.GET_ROUTE, w.GetRouteRequest("a"), w.RouteResponse)
            assert route.topic == "a"
            toy.clock.now += 31
            toy.server.sweep()
            await asyncio.sleep(0.1)
            assert not toy.server.connections
            route = await link.call(RequestCode.GET_ROUTE, w.GetRouteRequest("b"), w.RouteResponse)
            assert route.topic == "b"
        finally:
            await link.close()
