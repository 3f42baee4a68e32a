"""How a client connection reads (client/connection.py): into one buffer kept for the
connection's life, each read's bytes copied out before the next read reuses the buffer, so no
frame handed on changes afterwards, and frames split over reads or larger than the buffer
arrive whole (docs/benchmarks.md, "The client's reads, one buffer per connection (issue 32)")."""

from __future__ import annotations

import asyncio
import socket

from pocketmq.client import connection as connection_module
from pocketmq.client.connection import ClientConnection
from pocketmq.protocol import FrameKind, encode_frame


async def _connected() -> tuple[ClientConnection, socket.socket, list[tuple[int, bytes]]]:
    """A connection on one end of a socket pair, its pushes recorded; the other end."""
    ours, theirs = socket.socketpair()
    pushes: list[tuple[int, bytes]] = []
    connection = ClientConnection("pair", lambda _c, code, body: pushes.append((code, body)))
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: connection, sock=ours)
    theirs.setblocking(False)
    return connection, theirs, pushes


async def _until(pushes: list[tuple[int, bytes]], count: int) -> None:
    for _ in range(500):
        if len(pushes) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(pushes)} of {count} frames arrived")


def _push(code: int, body: bytes) -> bytes:
    return encode_frame(FrameKind.ONEWAY, code, 0, body)


async def test_a_frame_handed_on_is_not_changed_by_the_next_read() -> None:
    connection, theirs, pushes = await _connected()
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(theirs, _push(1, b"a" * 1000))
        await _until(pushes, 1)
        await loop.sock_sendall(theirs, _push(2, b"b" * 1000))
        await _until(pushes, 2)
        assert pushes == [(1, b"a" * 1000), (2, b"b" * 1000)]
        assert all(type(body) is bytes for _, body in pushes)
    finally:
        connection.close()
        theirs.close()


async def test_frames_split_over_reads_and_larger_than_the_buffer_arrive_whole() -> None:
    connection, theirs, pushes = await _connected()
    loop = asyncio.get_running_loop()
    large = bytes(range(256)) * (connection_module._READ_SIZE // 256 * 3 + 7)
    stream = _push(3, b"small") + _push(4, large) + _push(5, b"tail")
    try:
        # cut inside the first header, inside a body, and past the buffer's size
        chunks = [stream[:3], stream[3:14], stream[14:200_000], stream[200_000:]]
        for chunk in chunks:
            await loop.sock_sendall(theirs, chunk)
            await asyncio.sleep(0.01)
        await _until(pushes, 3)
        assert pushes == [(3, b"small"), (4, large), (5, b"tail")]
    finally:
        connection.close()
        theirs.close()


def test_the_connection_reads_into_its_own_buffer() -> None:
    connection = ClientConnection("pair", None)
    first = connection.get_buffer(-1)
    assert len(first) == connection_module._READ_SIZE
    first[:5] = b"hello"
    assert connection.get_buffer(-1) is first  # one buffer for the connection's life
