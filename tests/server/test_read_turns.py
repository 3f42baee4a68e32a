"""A connection that brings a large read lets the event loop take a turn before it reads again
(``YIELD_AFTER_BYTES``): uvloop reads again at once while each read fills its buffer, up to 32
times per wake-up, so one pipelining client held the loop for all of them — timers ran hundreds
of ms late and flow control refused sends (docs/benchmarks.md, "Event loops")."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from pocketmq.protocol import PROTOCOL_VERSION, FrameKind, RequestCode, encode_body, encode_frame
from pocketmq.protocol import structs as w
from pocketmq.server.native.connection import YIELD_AFTER_BYTES, ServerConnection
from pocketmq.server.native.tcp import FrameServer
from tests.server.conftest import FakeTransport, Toy, toy_handlers


def _request(code: int, request_id: int, body: Any) -> bytes:
    return encode_frame(FrameKind.REQUEST, code, request_id, encode_body(body))


def _echoes(count: int, first_id: int = 2, topic: str = "t" * 200) -> bytes:
    request = w.GetRouteRequest(topic)
    return b"".join(_request(RequestCode.GET_ROUTE, first_id + n, request) for n in range(count))


def _connected() -> tuple[ServerConnection, FakeTransport]:
    connection = ServerConnection(toy_handlers(Toy()), lambda c: None, set())
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    hello = w.HelloRequest(PROTOCOL_VERSION, "c", "1")
    connection.data_received(_request(RequestCode.HELLO, 1, hello))
    return connection, transport


async def _next_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_a_large_read_pauses_reading_until_the_next_turn() -> None:
    connection, transport = _connected()
    data = _echoes(400)
    assert len(data) >= YIELD_AFTER_BYTES
    connection.data_received(data)
    assert transport.calls == ["pause"]
    assert len(transport.written) == 2  # HELLO's answer, then every echo's in one write
    await _next_turn()
    assert transport.calls == ["pause", "resume"]


async def test_small_reads_never_pause() -> None:
    connection, transport = _connected()
    for n in range(20):
        connection.data_received(_echoes(3, first_id=10 + 3 * n))
    await _next_turn()
    assert transport.calls == []


async def test_a_client_reading_slowly_stays_paused_after_the_turn() -> None:
    connection, transport = _connected()
    connection.data_received(_echoes(400))
    connection.pause_writing()  # the client's window filled meanwhile
    await _next_turn()
    assert "resume" not in transport.calls
    connection.resume_writing()
    assert transport.calls[-1] == "resume"


async def test_the_turn_does_not_resume_a_connection_that_closed() -> None:
    connection, transport = _connected()
    connection.data_received(_echoes(400))
    connection.connection_lost(None)
    await _next_turn()
    assert "resume" not in transport.calls


def _blast(port: int, data: bytes, done: threading.Event) -> None:
    """A pipelining client: everything in one go, then read every answer until EOF."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        hello = w.HelloRequest(PROTOCOL_VERSION, "c", "1")
        sock.sendall(_request(RequestCode.HELLO, 1, hello) + data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(1 << 20):
            pass
    done.set()


async def _reads_per_turn(size: int) -> list[list[int]]:
    """Serve one client sending ``size`` bytes of requests; the reads of each loop turn."""
    loop = asyncio.get_running_loop()
    turns: list[list[int]] = [[]]

    def tick() -> None:
        if turns[-1]:
            turns.append([])
        handle[0] = loop.call_soon(tick)

    handle = [loop.call_soon(tick)]
    original = ServerConnection.data_received

    def recording(self: ServerConnection, data: bytes) -> None:
        turns[-1].append(len(data))
        original(self, data)
        if len(data) < 1000:  # EOF follows: the client sent everything
            self.close()

    server = FrameServer(toy_handlers(Toy()))
    await server.start("127.0.0.1", 0)
    ServerConnection.data_received = recording  # type: ignore[method-assign]
    done = threading.Event()
    data = _echoes(size // 260)
    try:
        # stall the loop while the client writes, so the socket holds far more than one read
        client = threading.Thread(target=_blast, args=(server.port, data, done), daemon=True)
        client.start()
        await asyncio.sleep(0.05)
        threading.Event().wait(0.3)
        await asyncio.to_thread(done.wait, 30)
    finally:
        ServerConnection.data_received = original  # type: ignore[method-assign]
        handle[0].cancel()
        await server.close()
    return [t for t in turns if t]


def _run(loop_factory: Callable[[], asyncio.AbstractEventLoop], size: int) -> list[list[int]]:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_reads_per_turn(size))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_pipelining_client_gets_one_large_read_per_loop_turn(loop: str) -> None:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    turns = _run(factory, 4 << 20)
    assert sum(map(len, turns)) > 4, turns  # the data did come in several reads
    for reads in turns:
        large = [size for size in reads if size >= YIELD_AFTER_BYTES]
        assert len(large) <= 1, turns
        if large:  # and it was the turn's last read
            assert reads[-1] == large[0], turns
