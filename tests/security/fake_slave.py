"""A fake slave: a peer of a master's replication port that speaks its real frames
(docs/replication.md §2) but is no broker — what an attacker, or a member that hangs, can do there.

It encodes the link bodies itself from the documented wire format (MessagePack arrays), so it
runs against any version of the master, and it reads in the background: every ``HA_DATA`` byte
it is sent is counted (``data_bytes``), and while ``acking`` it acknowledges what it received as
a real slave would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import ssl

import msgspec

from pocketmq.errors import Code, ProtocolError
from pocketmq.protocol import Frame, FrameDecoder, FrameKind, decode_body, encode_body, encode_frame
from pocketmq.protocol import replication as ha
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import client_proof, normalize_address
from pocketmq.protocol.body import Body

HA_HELLO, HA_DATA, HA_ACK, HA_METADATA, HA_OFFSETS, HA_LINK, HA_LINK_PROOF = range(100, 107)


class LinkHello(Body, frozen=True):
    group: str
    broker_id: int
    nonce: str


class LinkChallenge(Body, frozen=True):
    authentication: bool
    challenge: str
    server_name: str
    role: str
    epoch: int


class LinkProof(Body, frozen=True):
    proof: str


class FakeSlave:
    """One connection to a replication port (module doc). Use :meth:`connect`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Frame]] = {}
        self._hellos: set[int] = set()
        self.data_bytes = 0  # log bytes the master sent this peer
        self.position = -1  # the end of the log it holds (-1: nothing yet)
        self.master_end = -1
        self.acking = False
        self.closed = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, address: str, tls: ssl.SSLContext | None = None) -> FakeSlave:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port), ssl=tls)
        return cls(reader, writer)

    async def _read(self) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = await self._reader.read(1 << 20)
                if not data:
                    return
                for frame in decoder.feed(data):
                    self._take(frame)
        except (ConnectionError, OSError, ProtocolError, ssl.SSLError):
            return
        finally:
            self.closed.set()
            for waiter in self._waiting.values():
                waiter.cancel()

    def _take(self, frame: Frame) -> None:
        if frame.kind == FrameKind.RESPONSE:
            if frame.request_id in self._hellos and frame.code == Code.SUCCESS:
                # here, not in hello(): the stream's first chunks may follow in the same read
                self.position = decode_body(frame.body, ha.HaHelloReply).start
            waiter = self._waiting.pop(frame.request_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(frame)
        elif frame.code == HA_DATA:
            chunk = decode_body(frame.body, ha.HaData)
            self.data_bytes += len(chunk.data)
            self.master_end = chunk.log_end
            if chunk.data:
                self.position = chunk.offset + len(chunk.data)
            if self.acking:
                self.ack(self.position)

    def send(self, kind: FrameKind, code: int, body: msgspec.Struct) -> int:
        request_id = next(self._ids)
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self._writer.write(encode_frame(kind, code, request_id, encode_body(body)))
        return request_id

    async def request(self, code: int, body: msgspec.Struct, timeout: float = 5.0) -> Frame | None:
        """The master's answer, or None when it closed the connection (or never answered)."""
        if self.closed.is_set():
            return None
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        request_id = self.send(FrameKind.REQUEST, code, body)
        self._waiting[request_id] = waiter
        if code == HA_HELLO:
            self._hellos.add(request_id)
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except (TimeoutError, asyncio.CancelledError):
            return None

    async def hello(
        self, group: str, broker_id: int, *, cluster_id: str = "", log_end: int = 0,
        epochs: list[ha.HaEpoch] | None = None,
    ) -> Frame | None:  # fmt: skip
        """HA_HELLO as a slave holding ``log_end`` bytes of ``epochs`` (nothing by default)."""
        body = ha.HaHello(group, cluster_id, broker_id, "127.0.0.1:1", log_end, epochs or [])
        return await self.request(HA_HELLO, body)

    async def link(self, group: str, broker_id: int, secret: str | None) -> Frame | None:
        """HA_LINK, then (with a ``secret``) HA_LINK_PROOF made with it; the last answer."""
        nonce = secrets.token_hex(16)
        answer = await self.request(HA_LINK, LinkHello(group, broker_id, nonce))
        if answer is None or answer.code != Code.SUCCESS or secret is None:
            return answer
        challenge = decode_body(answer.body, LinkChallenge)
        host, port = self._writer.get_extra_info("peername")[:2]
        proof = client_proof(
            secret,
            challenge.challenge,
            nonce,
            f"ha-slave:{broker_id}",
            challenge.server_name,
            normalize_address(host, port),
        )
        return await self.request(HA_LINK_PROOF, LinkProof(proof))

    def ack(self, written: int) -> None:
        self.send(FrameKind.ONEWAY, HA_ACK, ha.HaAck(written, written, 0))

    async def offsets(self, offsets: dict[str, int]) -> Frame | None:
        return await self.request(HA_OFFSETS, ha.HaOffsets(offsets, b""))

    async def caught_up(self, timeout: float = 10.0) -> None:
        """Wait until it holds the master's whole log (as the master last said)."""
        async with asyncio.timeout(timeout):
            while self.master_end < 0 or self.position < self.master_end:
                if self.closed.is_set():
                    raise ConnectionError("the master closed the link")
                await asyncio.sleep(0.02)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            await self._writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def refusal(frame: Frame | None) -> str:
    """The reason of a refusal ("" for a success or no answer at all)."""
    if frame is None or frame.code == Code.SUCCESS:
        return ""
    return decode_body(frame.body, w.ErrorBody).remark
