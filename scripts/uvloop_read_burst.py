"""How long one busy connection holds the event loop: asyncio against uvloop, no pocketmq.

A client process streams 32 MiB as fast as the server takes it. The server's protocol spends
``--work`` ms of CPU per 64 KiB it receives (as a broker decoding and storing pipelined frames
does) and a ticker measures how late a 10 ms timer fires. asyncio reads once per readiness
event and returns to the loop; uvloop (libuv's ``uv__read``) reads again at once while each read
fills its 256,000-byte buffer, up to 32 reads per wake-up, so timers and every other connection
wait for all of them (docs/benchmarks.md, "Event loops"). ``--yield-reads`` makes the protocol
pause reading after a large read and resume on the next loop turn, which bounds the hold to one
read on both loops.

    python scripts/uvloop_read_burst.py [--yield-reads]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from collections.abc import Callable

TOTAL = 32 * 1024 * 1024


class Busy(asyncio.Protocol):
    """Spends CPU in proportion to what each read brings; optionally yields after a big read."""

    def __init__(self, work_ms_per_64k: float, yield_reads: bool, done: asyncio.Event) -> None:
        self.work = work_ms_per_64k / 1000 / 65536
        self.yield_reads = yield_reads
        self.done = done
        self.received = 0
        self.reads: list[int] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reads.append(len(data))
        end = time.perf_counter() + len(data) * self.work
        while time.perf_counter() < end:
            pass
        self.received += len(data)
        assert self.transport is not None
        self.transport.write(b"k" * 64)
        if self.received >= TOTAL:
            self.done.set()
            self.transport.close()
        elif self.yield_reads and len(data) >= 65536:
            self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self.transport.resume_reading)


async def serve(work: float, yield_reads: bool) -> tuple[float, float, int, float]:
    """Worst and median timer lateness (ms), reads, seconds."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    protocol = Busy(work, yield_reads, done)
    server = await loop.create_server(lambda: protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    late: list[float] = []

    async def tick() -> None:
        while True:
            expected = loop.time() + 0.01
            await asyncio.sleep(0.01)
            late.append(loop.time() - expected)

    ticker = asyncio.create_task(tick())
    client = await asyncio.create_subprocess_exec(sys.executable, __file__, "--client", str(port))
    started = time.perf_counter()
    await done.wait()
    seconds = time.perf_counter() - started
    ticker.cancel()
    await client.wait()  # it reads until the close above reaches it
    server.close()
    late.sort()
    return late[-1] * 1000, late[len(late) // 2] * 1000, len(protocol.reads), seconds


def client(port: int) -> None:
    """Send TOTAL bytes as fast as the socket takes them; drain the small answers."""
    sock = socket.create_connection(("127.0.0.1", port))
    chunk = b"x" * 1_048_576
    for _ in range(TOTAL // len(chunk)):
        sock.sendall(chunk)
    sock.shutdown(socket.SHUT_WR)  # closing with answers unread would reset the connection
    while sock.recv(65536):
        pass
    sock.close()


def main() -> None:
    """Run the server on both loops, twice each, alternating."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=float, default=2.0, help="ms of CPU per 64 KiB read")
    parser.add_argument("--yield-reads", action="store_true")
    args = parser.parse_args()
    if args.client:
        client(args.client)
        return
    import uvloop

    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop,
        "uvloop": uvloop.new_event_loop,
    }
    for _ in range(2):
        for name, factory in loops.items():
            with asyncio.Runner(loop_factory=factory) as runner:
                worst, median, reads, seconds = runner.run(serve(args.work, args.yield_reads))
            print(
                f"{name:8s} yield={args.yield_reads!s:5s} timer late: worst {worst:6.1f} ms, "
                f"median {median:5.1f} ms; {reads} reads, {seconds:.2f} s"
            )


if __name__ == "__main__":
    main()
