"""A remoting connection, through a real socket: requests dispatched by code and answered with
their opaque and serialization, one-way requests unanswered, unknown codes refused as RocketMQ
refuses them, slow handlers out of the way, errors mapped to RocketMQ's codes, bad frames
closing only their connection, the buffer budget, idle time, and the server's own requests
(apache/rocketmq ``NettyRemotingAbstract.processRequestCommand``/``processResponseCommand``)."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from pocketmq.errors import BrokerConnectionError, RequestTimeoutError, TooManyRequestsError
from pocketmq.protocol.remoting import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, encode_command
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.frames import MAX_FRAME
from pocketmq.server.remoting.outbound import DEFAULT_WAITING_LIMIT

from .conftest import StartDual, request

ROUTE = RC.GET_ROUTEINFO_BY_TOPIC
MiB = 1024 * 1024


async def test_pipelined_requests_are_answered_by_opaque(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        frames = b"".join(request(ROUTE, n, {"topic": f"t{n}"}) for n in range(1, 50))
        await client.send(frames)
        for n in range(1, 50):
            answer = await client.answer(n)
            assert (answer.code, answer.body, answer.flag) == (0, f"t{n}".encode(), FLAG_RESPONSE)
            assert answer.language == "JAVA"
            assert answer.version == 401


async def test_one_way_requests_get_no_answer(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        await client.send(
            request(ROUTE, 1, {"topic": "quiet"}, oneway=True)
            + request(999, 2, oneway=True)  # unknown and one-way: no answer either
            + request(RC.UPDATE_AND_CREATE_TOPIC, 3, oneway=True)  # fails, silently
            + request(ROUTE, 4, {"topic": "loud"})
        )
        answer = await client.answer(4)
        assert answer.body == b"loud"
        await client.read_some(0.2)
        assert client.received == []


async def test_an_unknown_code_is_not_supported_as_rocketmq_says(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        await client.send(request(12345, 6))
        answer = await client.answer(6)
        assert answer.code == R.REQUEST_CODE_NOT_SUPPORTED
        assert answer.remark == " request type 12345 not supported"  # RocketMQ's own remark
        await client.send(request(ROUTE, 7, {"topic": "after"}))
        assert (await client.answer(7)).body == b"after"


async def test_a_slow_handler_does_not_hold_up_the_requests_behind_it(
    start_dual: StartDual,
) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        await client.send(request(RC.PULL_MESSAGE, 1) + request(ROUTE, 2, {"topic": "fast"}))
        assert (await client.answer(2)).body == b"fast"
        dual.toy.release.set()
        answer = await client.answer(1)
        assert (answer.code, answer.remark) == (R.PULL_NOT_FOUND, "nothing new")


async def test_errors_are_answered_with_rocketmq_codes(
    start_dual: StartDual, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="pocketmq.server")
    async with start_dual() as dual:
        client = await dual.remoting()
        await client.send(request(RC.UPDATE_AND_CREATE_TOPIC, 1))
        answer = await client.answer(1)
        assert (answer.code, answer.remark) == (R.TOPIC_NOT_EXIST, "no such topic")
        for opaque in (2, 3, 4):
            await client.send(request(RC.GET_KV_CONFIG, opaque))
            answer = await client.answer(opaque)
            assert answer.code == R.SYSTEM_ERROR
            assert answer.remark == "internal error: a handler bug"
    bugs = [r for r in caplog.records if "remoting handler for code 101 failed" in r.message]
    assert len(bugs) == 1, "a handler bug is logged once per interval, not once per request"


async def test_requests_before_a_bad_frame_are_answered_then_it_closes(
    start_dual: StartDual,
) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        other = await dual.remoting()
        garbage = struct.pack(">II", 20, 2 << 24 | 4) + bytes(16)  # serialize type 2
        await client.send(
            request(ROUTE, 1, {"topic": "a"}) + request(ROUTE, 2, {"topic": "b"}) + garbage
        )
        received = await client.until_closed()
        assert sorted(c.opaque for c in received) == [1, 2]
        await other.send(request(ROUTE, 3, {"topic": "unharmed"}))
        assert (await other.answer(3)).body == b"unharmed"


async def test_a_lenient_header_that_turns_malformed_closes_only_its_connection(
    start_dual: StartDual, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSON header with a number where a string goes, then broken JSON (found by fuzzing):
    refused like any bad frame, not a crash of the connection's read loop."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    async with start_dual() as dual:
        client = await dual.remoting()
        header = b'{"code":105,"language":7,"opaque":}'
        bad = struct.pack(">II", 4 + len(header), len(header)) + header
        await client.send(request(ROUTE, 1, {"topic": "a"}) + bad)
        received = await client.until_closed()
        assert [c.opaque for c in received] == [1]
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


async def test_a_frame_over_16_mib_closes_the_connection_at_its_length(
    start_dual: StartDual,
) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        await client.send(struct.pack(">II", MAX_FRAME, 20) + b"{")
        await client.until_closed()
        assert dual.server.budget.used == 0


async def test_partly_received_frames_share_the_port_s_budget(start_dual: StartDual) -> None:
    """Frames still arriving hold at most ``max_buffered_bytes`` across the port; the remoting
    request that would pass it is answered SYSTEM_BUSY, its body skipped, the connection kept."""
    async with start_dual(max_buffered_bytes=16 * MiB) as dual:
        first, second = await dual.remoting(), await dual.remoting()
        big = request(ROUTE, 1, {"topic": "big"}, b"x" * (10 * MiB))
        await first.send(big[: 9 * MiB])
        await asyncio.sleep(0.1)
        held = dual.server.budget.used
        assert held >= 8 * MiB
        other = request(ROUTE, 2, {"topic": "other"}, b"y" * (10 * MiB))
        await second.send(other[: 9 * MiB])
        answer = await second.answer(2)
        assert answer.code == R.SYSTEM_BUSY
        assert "back off" in (answer.remark or "")
        await second.send(other[9 * MiB :] + request(ROUTE, 3, {"topic": "after"}))
        assert (await second.answer(3)).body == b"after"
        await first.send(big[9 * MiB :])
        assert (await first.answer(1)).body == b"big"
        await asyncio.sleep(0.05)
        assert dual.server.budget.used == 0


async def test_idle_connections_close_but_not_while_serving(start_dual: StartDual) -> None:
    async with start_dual(idle_timeout=60) as dual:
        idle, polling = await dual.remoting(), await dual.remoting()
        await idle.send(request(ROUTE, 1, {"topic": "x"}))
        await idle.answer(1)
        await polling.send(request(RC.PULL_MESSAGE, 1))
        await asyncio.sleep(0.05)
        dual.clock.now += 61
        dual.server.sweep()
        await idle.until_closed()
        await polling.read_some(0.1)
        assert not polling.closed, "a connection waiting for an answer is not idle"
        dual.toy.release.set()
        assert (await polling.answer(1)).code == R.PULL_NOT_FOUND
        dual.clock.now += 61
        dual.server.sweep()
        await polling.until_closed()


async def test_a_closed_connection_stops_its_long_polls(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        client = await dual.remoting()
        await client.send(request(RC.PULL_MESSAGE, 1))
        await asyncio.sleep(0.05)
        [connection] = dual.port.connections
        assert connection.inflight == 1
        client.close()
        for _ in range(100):
            if connection.inflight == 0:
                break
            await asyncio.sleep(0.01)
        assert connection.inflight == 0
        assert connection.closed


# -- the server's own requests ----------------------------------------------------------------


async def test_a_push_is_a_one_way_request_with_the_server_s_own_opaque(
    start_dual: StartDual,
) -> None:
    async with start_dual() as dual:
        client, connection = await dual.heartbeated(opaque=500, binary=True)
        connection.push(RC.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"})
        connection.push(RC.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "h"})
        pushes = [await client.next(lambda c: not c.is_response) for _ in range(2)]
        assert [p.code for p in pushes] == [RC.NOTIFY_CONSUMER_IDS_CHANGED] * 2
        assert [p.ext_fields for p in pushes] == [{"consumerGroup": "g"}, {"consumerGroup": "h"}]
        assert all(p.flag == FLAG_ONEWAY for p in pushes)
        assert [p.opaque for p in pushes] == [1, 2]  # the server's counter, not the client's
        assert all(p.serialize_type == 1 for p in pushes)  # the client spoke binary headers


async def test_a_server_request_is_answered_by_the_client_s_response(
    start_dual: StartDual,
) -> None:
    async with start_dual() as dual:
        client, connection = await dual.heartbeated()
        waiting = asyncio.ensure_future(
            connection.request(RC.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g"})
        )
        asked = await client.next(lambda c: c.code == RC.GET_CONSUMER_RUNNING_INFO)
        assert asked.flag == 0
        assert asked.ext_fields == {"consumerGroup": "g"}
        # a stray response first (nobody waits for it), then the real one
        stray = RemotingCommand(0, asked.opaque + 1000, FLAG_RESPONSE, body=b"stray")
        real = RemotingCommand(0, asked.opaque, FLAG_RESPONSE, body=b"{running}")
        await client.send(encode_command(stray) + encode_command(real))
        answer = await asyncio.wait_for(waiting, 2)
        assert answer.body == b"{running}"
        assert connection.outbound.waiting == 0


async def test_server_requests_time_out_are_bounded_and_fail_on_close(
    start_dual: StartDual,
) -> None:
    async with start_dual() as dual:
        client, connection = await dual.heartbeated()
        with pytest.raises(RequestTimeoutError, match="did not answer"):
            await connection.request(RC.GET_CONSUMER_RUNNING_INFO, timeout=0.05)
        assert connection.outbound.waiting == 0
        waiting = [
            asyncio.ensure_future(connection.request(RC.GET_CONSUMER_RUNNING_INFO, timeout=30))
            for _ in range(DEFAULT_WAITING_LIMIT)
        ]
        await asyncio.sleep(0.01)
        with pytest.raises(TooManyRequestsError):
            await connection.request(RC.GET_CONSUMER_RUNNING_INFO)
        client.close()
        for answer in waiting:
            with pytest.raises(BrokerConnectionError, match="closed"):
                await asyncio.wait_for(answer, 2)
        with pytest.raises(BrokerConnectionError):
            connection.push(RC.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"})
