"""Issue 14 item 14 (the server's half): at the file-descriptor limit, new clients get a clear
error instead of a timeout, and the broker logs the condition once, not once per attempt.

The limit is real: the test lowers this process's RLIMIT_NOFILE and uses up every descriptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
from collections.abc import Iterator

import pytest

from pocketmq.errors import Code
from pocketmq.protocol import FrameDecoder, decode_body
from pocketmq.protocol import structs as w
from pocketmq.server.native.tcp import FrameServer

from .conftest import RawClient, Toy, toy_handlers


@contextlib.contextmanager
def descriptors_exhausted() -> Iterator[list[int]]:
    """Lower the descriptor limit a little above what is open, then open descriptors until the
    kernel says EMFILE; yields them (close some to let a client in), restores everything."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 32, hard))
    hog: list[int] = []
    try:
        error = 0
        while not error:
            try:
                hog.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                error = exc.errno or -1
        assert error == errno.EMFILE
        yield hog
    finally:
        for fd in hog:
            with contextlib.suppress(OSError):
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _first_frame(sock: socket.socket, timeout: float = 3.0) -> w.ErrorBody:
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    decoder = FrameDecoder()
    while True:
        data = await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout)
        assert data, "closed without an answer"
        frames = decoder.feed(data)
        if frames:
            assert frames[0].request_id == 0
            assert frames[0].code == Code.SERVICE_NOT_AVAILABLE
            return decode_body(frames[0].body, w.ErrorBody)


async def test_out_of_descriptors_clients_are_told_and_it_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pocketmq.server")
    server = FrameServer(toy_handlers(Toy()))
    await server.start("127.0.0.1", 0)
    try:
        address = (server.host, server.port)
        with descriptors_exhausted() as hog:
            clients = []
            for _ in range(5):
                os.close(hog.pop())  # one descriptor for the client's own socket
                sock = socket.socket()
                sock.settimeout(2)
                sock.connect(address)  # completes in the kernel's backlog
                clients.append(sock)
            try:
                answers = [await _first_frame(sock) for sock in clients]
            finally:
                for sock in clients:
                    sock.close()
        assert all("out of file descriptors" in a.remark for a in answers)
        lines = [r for r in caplog.records if "accept" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in caplog.records]
        # descriptors are back: the server accepts again (within its backoff)
        reader, writer = await asyncio.open_connection(server.host, server.port)
        client = RawClient(reader, writer)
        try:
            assert (await client.hello()).code == Code.SUCCESS
        finally:
            client.close()
    finally:
        await server.close()
