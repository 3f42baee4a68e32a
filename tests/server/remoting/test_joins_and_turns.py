"""The remoting connection's two throughput rules, as the native connection's
(tests/server/test_joined_requests.py, test_read_turns.py): requests of one read whose
handlers answer :class:`Joined` are done by one call, in order, before a request of another
code; and a read of 64 KiB or more pauses reading until the loop's next turn (uvloop reads up
to 32 × 256,000 bytes per wake-up: a pipelining producer held the loop and flow control
refused its sends, docs/benchmarks.md "Remoting sends")."""

from __future__ import annotations

import asyncio
from typing import Any

from pocketmq.protocol.remoting import RemotingCommand, RequestCode
from pocketmq.server.remoting import RemotingConnection, Reply
from pocketmq.server.remoting.connection import YIELD_AFTER_BYTES
from pocketmq.server.remoting.outcomes import Joined

from ..conftest import FakeTransport
from .conftest import StartDual, request

SEND = RequestCode.SEND_MESSAGE_V2


async def test_requests_of_one_read_are_joined_until_another_code(start_dual: StartDual) -> None:
    calls: list[list[str]] = []

    def run(items: list[Any]) -> list[object]:
        calls.append(list(items))
        return [Reply(ext_fields={"item": item}) for item in items]

    def send(conn: RemotingConnection, command: RemotingCommand) -> Joined:
        return Joined(run, command.ext_fields["n"])

    async with start_dual() as dual:
        dual.port.handlers[SEND] = send
        client = await dual.remoting()
        frames = [request(SEND, n, {"n": str(n)}) for n in range(1, 6)]
        frames.append(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 6, {"topic": "t"}))
        frames += [request(SEND, n, {"n": str(n)}) for n in range(7, 10)]
        await client.send(b"".join(frames))
        for opaque in (*range(1, 6), *range(7, 10)):
            assert (await client.answer(opaque)).ext_fields == {"item": str(opaque)}
        assert (await client.answer(6)).body == b"t"
    assert calls == [["1", "2", "3", "4", "5"], ["7", "8", "9"]]


async def test_a_large_read_pauses_reading_until_the_next_turn(start_dual: StartDual) -> None:
    async with start_dual() as dual:
        connection = dual.port.connection(dual.server._share, 0.0)
        transport = FakeTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        small = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": "t"})
        connection.data_received(small)
        assert transport.calls == []
        large = b"".join(
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, n, {"topic": "t" * 200})
            for n in range(2, 400)
        )
        assert len(large) >= YIELD_AFTER_BYTES
        connection.data_received(large)
        assert transport.calls == ["pause"]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert transport.calls == ["pause", "resume"]
        connection.connection_lost(None)
