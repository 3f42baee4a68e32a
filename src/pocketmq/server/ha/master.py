"""The master's replication port: one link per slave (docs/replication.md §2).

A slave says how much log it holds of which terms; the master answers where its copy must go on
(cutting what the master's history does not have), then streams its commit log from there in
chunks read straight from the segment files, and keeps streaming as records are appended. The
slave's acknowledgements feed the broker's replication state (the in-sync set, SYNC sends, the
confirmed offset). The same link carries the slave's metadata requests and, when a slave served
reads while this master was away, the offsets its consumers committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

import msgspec

from pocketmq.broker import Broker
from pocketmq.broker.replica_log import ReplicaRefused
from pocketmq.broker.replication import Role
from pocketmq.errors import Code
from pocketmq.protocol import Frame, FrameKind, RequestCode, decode_body
from pocketmq.protocol import replication as ha
from pocketmq.protocol import structs as w
from pocketmq.server.ha.link import HANDSHAKE_TIMEOUT, LinkRefused, answer_hello
from pocketmq.server.ha.stream import FrameStream

__all__ = ["HaServer"]

log = logging.getLogger("pocketmq.server.ha")

CHUNK_BYTES = 1 << 20
_IDLE_WAIT = 1.0


class HaServer:
    """Accepts slaves and streams the log to each."""

    def __init__(
        self, broker: Broker, *, chunk_bytes: int = CHUNK_BYTES, tls: ssl.SSLContext | None = None
    ) -> None:
        self._broker = broker
        self._tls = tls  # the broker's certificate: slaves connect over TLS (docs/security.md)
        self._chunk = chunk_bytes
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self._streams: dict[object, FrameStream] = {}
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen for slaves on ``host:port`` (0: any free port, then in :attr:`port`)."""
        self._server = await asyncio.start_server(
            self._accept, host, port, reuse_address=True, ssl=self._tls
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._link(FrameStream(reader, writer)))
        self._links.add(task)
        task.add_done_callback(self._links.discard)

    async def _link(self, stream: FrameStream) -> None:
        broker = self._broker
        key = object()
        sender: asyncio.Task[None] | None = None
        try:
            frames = stream.frames()
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT * 5):  # a silent peer holds nothing
                    first = await anext(frames, None)
            except TimeoutError:
                return
            try:
                accepted = answer_hello(stream, first, self._hello)
            except ReplicaRefused as exc:
                await stream.drain()
                log.warning("refused a slave from %s: %s", stream.peer, exc)
                return
            if accepted is None:  # not a hello, or a probe that has its answer
                await stream.drain()
                return
            hello, position = accepted
            broker.replication.slave_connected(
                key, hello.broker_id, hello.address, position, hello.missing_until
            )
            self._streams[key] = stream
            log.info(
                "slave %d (%s) replicating from offset %d", hello.broker_id, stream.peer, position
            )
            sender = asyncio.create_task(self._stream_log(stream, position))
            async for frame in frames:
                self._handle(stream, key, frame)
        except (ConnectionError, OSError, msgspec.MsgspecError) as exc:
            log.info("replication link from %s ended: %s", stream.peer, exc)
        finally:
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await sender
            broker.replication.slave_gone(key)
            self._streams.pop(key, None)
            await stream.close()

    def _hello(self, hello: ha.HaHello) -> tuple[ha.HaHelloReply, int]:
        """Where the slave's copy goes on (a probe: only who this master is); raises
        ReplicaRefused. Credentials, once the port has them, are checked here too."""
        broker = self._broker
        if broker.role is not Role.MASTER:
            raise LinkRefused(f"broker {broker.name!r} is not a master", Code.NO_PERMISSION)
        if hello.group != broker.replica_log.group:
            raise LinkRefused(
                f"this master is of group {broker.replica_log.group!r}, not {hello.group!r}",
                Code.NO_PERMISSION,
            )
        refusal = broker.replication.write_refusal()
        if refusal:  # its slaves must be free to elect a new master (docs/replication.md §9)
            raise LinkRefused(
                f"broker {broker.name!r} takes no writes now: {refusal}", Code.SERVICE_NOT_AVAILABLE
            )
        replica_log = broker.replica_log
        epochs_now = [ha.HaEpoch(number, start) for number, start in replica_log.epochs()]
        if hello.probe:
            return ha.HaHelloReply(replica_log.cluster_id(), epochs_now, -1, replica_log.end), 0
        epochs = [(e.number, e.start) for e in hello.epochs]
        plan = replica_log.plan(hello.group, hello.cluster_id, epochs, hello.log_end)
        reply = ha.HaHelloReply(
            plan.cluster_id,
            [ha.HaEpoch(number, start) for number, start in plan.epochs],
            plan.truncate_to,
            plan.start,
        )
        return reply, plan.start

    def push_metadata(self) -> None:
        """Send the state files to every slave now: topics or groups changed, and a failover
        before the slave's next copy must not lose them."""
        if not self._streams:
            return
        body = ha.HaMetadata(self._broker.state_copy.files())
        for stream in list(self._streams.values()):
            with contextlib.suppress(ConnectionError, OSError):
                stream.send(FrameKind.ONEWAY, RequestCode.HA_METADATA, body)

    def _handle(self, stream: FrameStream, key: object, frame: Frame) -> None:
        broker = self._broker
        if frame.code == RequestCode.HA_ACK:
            ack = decode_body(frame.body, ha.HaAck)
            reaches = None if not ack.controller else ack.controller == 1
            broker.replication.acked(key, ack.written, ack.flushed, reaches)
        elif frame.code == RequestCode.HA_METADATA:
            reply = ha.HaMetadata(broker.state_copy.files())
            stream.send(FrameKind.RESPONSE, Code.SUCCESS, reply, frame.request_id)
        elif frame.code == RequestCode.HA_OFFSETS:
            handed = decode_body(frame.body, ha.HaOffsets)
            broker.state_copy.take_back(handed.offsets, handed.pop_state)
            stream.send(FrameKind.RESPONSE, Code.SUCCESS, w.Empty(), frame.request_id)

    async def _stream_log(self, stream: FrameStream, position: int) -> None:
        replica_log = self._broker.replica_log
        replication = self._broker.replication
        while True:
            data = replica_log.read(position, self._chunk)
            chunk = ha.HaData(position, data, replica_log.end)
            stream.send(FrameKind.ONEWAY, RequestCode.HA_DATA, chunk)
            await stream.drain()
            if data:
                position += len(data)
                replication.chunks_sent += 1
                replication.bytes_sent += len(data)
                continue
            if replica_log.end > position:
                # nothing readable where the log goes on: a damaged range (storage-format §7)
                log.error("replication cannot read the log at %d; retrying in 1 s", position)
                await asyncio.sleep(_IDLE_WAIT)
                continue
            await replication.wait_for_log(position, _IDLE_WAIT)  # then a heartbeat at least

    async def drop_links(self) -> None:
        """End every slave's link but keep listening: a master that lost its controller lease
        lets its slaves elect another (docs/replication.md §9)."""
        for task in list(self._links):
            task.cancel()
        for task in list(self._links):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def close(self) -> None:
        """Stop listening and end every slave's link (they reconnect to whoever is master)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._links):
            task.cancel()
        for task in list(self._links):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
