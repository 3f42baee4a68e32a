"""The master's replication port: one link per slave (docs/replication.md §2).

A slave says how much log it holds of which terms; the master answers where its copy must go on
(cutting what the master's history does not have), then streams its commit log from there in
chunks read straight from the segment files, and keeps streaming as records are appended. The
slave's acknowledgements feed the broker's replication state (the in-sync set, SYNC sends, the
confirmed offset). The same link carries the slave's metadata requests and, when a slave served
reads while this master was away, the offsets its consumers committed.

Who may open a link, and what one may cost, is decided here and in handshake.py (docs/
replication.md §2, "Handshake", "Membership", "Limits"): the cluster key when the group
authenticates; at most ``max_links`` connections, the oldest unproven one giving way to a new
one; a deadline for the handshake and an idle timeout after it; one live link per slave id;
acknowledgements never past what the link was sent; consumer offsets only from a member whose
store was a copy of this master's, and never past a queue's end. A *probe* (a master checking
the name server's claim that this one is its group's newer master, §6) passes the same handshake
and is told who this master is — its cluster, epochs and end — and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec

from pocketmq.broker import Broker
from pocketmq.broker.ha.replica_log import ReplicaRefused
from pocketmq.broker.ha.replication import Role
from pocketmq.errors import Code, ProtocolError
from pocketmq.protocol import Frame, FrameKind, RequestCode, decode_body
from pocketmq.protocol import replication as ha
from pocketmq.protocol import structs as w
from pocketmq.server.ha.handshake import LinkPolicy, LinkRefused, Peer, accept_link
from pocketmq.server.ha.stream import FrameStream

__all__ = ["HaServer"]

log = logging.getLogger("pocketmq.server.ha")

CHUNK_BYTES = 1 << 20
_IDLE_WAIT = 1.0


@dataclass(slots=True)
class _Link:
    """One slave's link after its handshake: who it is, and what the master sent it."""

    broker_id: int
    authenticated: bool
    held_a_copy: bool  # its HELLO named this store's identity: it followed this master before
    sent: int  # the log offset the stream has reached: an acknowledgement never counts past it


class _Refusals:
    """Logs refused links at most once per interval: a flood of them must not flood the log."""

    def __init__(self, interval: float = 10.0) -> None:
        self._interval = interval
        self._last = -interval
        self._quiet = 0

    def note(self, peer: str, reason: str) -> None:
        now = time.monotonic()
        if now - self._last < self._interval:
            self._quiet += 1
            return
        more = f" ({self._quiet} more refused since the last line)" if self._quiet else ""
        log.warning("refused a replication link from %s: %s%s", peer, reason, more)
        self._last, self._quiet = now, 0


class HaServer:
    """Accepts slaves and streams the log to each, within the port's limits (``policy``)."""

    def __init__(
        self,
        broker: Broker,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        tls: ssl.SSLContext | None = None,
        policy: LinkPolicy | None = None,
    ) -> None:
        self._broker = broker
        self._tls = tls  # the broker's certificate: slaves connect over TLS (docs/security.md)
        self._policy = policy or LinkPolicy()
        self._chunk = chunk_bytes
        self._server: asyncio.Server | None = None
        self._links: dict[asyncio.Task[None], None] = {}  # every connection, oldest first
        self._pending: dict[asyncio.Task[None], FrameStream] = {}  # still in their handshake
        self._by_id: dict[int, asyncio.Task[Any]] = {}  # the live link of each slave
        self._streams: dict[object, FrameStream] = {}
        self._refusals = _Refusals()
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen for slaves on ``host:port`` (0: any free port, then in :attr:`port`)."""
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            reuse_address=True,
            ssl=self._tls,
            ssl_handshake_timeout=self._policy.handshake_timeout if self._tls else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer)
        if len(self._links) >= self._policy.max_links:
            if not self._pending:  # every place holds a slave's live link: refuse the newcomer
                self._refused(stream.peer, f"{self._policy.max_links} links open already")
                writer.close()
                return
            # the oldest connection still in its handshake gives way: a stream of connections
            # that never prove anything cannot keep a real slave out
            oldest, unproven = next(iter(self._pending.items()))
            self._forget(oldest)
            unproven.writer.close()  # its task may not have started: close it here
            oldest.cancel()
        task = asyncio.ensure_future(self._link(stream))
        self._links[task] = None
        self._pending[task] = stream
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._links.pop(task, None)
        self._pending.pop(task, None)

    def _refused(self, peer: str, reason: str) -> None:
        self._broker.ha.replication.links_refused += 1
        self._refusals.note(peer, reason)

    def _standing(self) -> tuple[str, int]:
        # the role others see: a master that may not write now is "fenced" (§6, §9)
        return (
            self._broker.ha.replication.acting_role(),
            self._broker.ha.replica_log.current_epoch(),
        )

    async def _link(self, stream: FrameStream) -> None:
        broker = self._broker
        key = object()
        sender: asyncio.Task[None] | None = None
        task = asyncio.current_task()
        assert task is not None
        try:
            frames = stream.frames(self._policy.idle_timeout)
            try:
                async with asyncio.timeout(self._policy.handshake_timeout):
                    hello, link = await self._handshake(stream, frames)
            except TimeoutError:
                self._refused(stream.peer, "no handshake within the time allowed")
                return
            except LinkRefused as exc:
                self._refused(stream.peer, str(exc))
                return
            if link is None:  # a probe (§6): it has its answer
                await stream.drain()
                return
            stream.trust()
            self._pending.pop(task, None)
            self._replace(hello.broker_id, task, stream.peer)
            broker.ha.replication.slave_connected(
                key, hello.broker_id, hello.address, link.sent, hello.missing_until
            )
            self._streams[key] = stream
            log.info(
                "slave %d (%s%s) replicating from offset %d",
                hello.broker_id,
                stream.peer,
                ", authenticated" if link.authenticated else "",
                link.sent,
            )
            sender = asyncio.create_task(self._stream_log(stream, link))
            async for frame in frames:
                self._handle(stream, key, link, frame)
        except (ConnectionError, OSError, msgspec.MsgspecError, ProtocolError) as exc:
            log.info("replication link from %s ended: %s", stream.peer, exc)
        finally:
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await sender
            broker.ha.replication.slave_gone(key)
            self._streams.pop(key, None)
            for broker_id, holder in list(self._by_id.items()):
                if holder is task:
                    del self._by_id[broker_id]
            await stream.close()

    async def _handshake(
        self, stream: FrameStream, frames: AsyncIterator[Frame]
    ) -> tuple[ha.HaHello, _Link | None]:
        """The link's handshake (server/ha/handshake.py) and the slave's HELLO, answered;
        LinkRefused (the slave told why) when it may not follow this master. No link (None)
        for a probe: it is answered who this master is, and nothing more."""
        broker = self._broker
        peer, first = await accept_link(
            stream, frames, group=broker.name, policy=self._policy, standing=self._standing
        )
        hello = decode_body(first.body, ha.HaHello)
        try:
            problem = self._identity_problem(peer, hello)
            if problem:
                raise ReplicaRefused(problem)
            reply, position = self._hello(hello)
        except ReplicaRefused as exc:
            stream.send(
                FrameKind.RESPONSE, Code.NO_PERMISSION, w.ErrorBody(str(exc)), first.request_id
            )
            await stream.drain()
            raise LinkRefused(str(exc)) from None
        stream.send(FrameKind.RESPONSE, Code.SUCCESS, reply, first.request_id)
        if hello.probe:
            return hello, None
        held = bool(hello.cluster_id) and hello.cluster_id == reply.cluster_id
        return hello, _Link(hello.broker_id, peer.authenticated, held, position)

    def _identity_problem(self, peer: Peer, hello: ha.HaHello) -> str:
        """Why this HELLO may not open a slave's link ("" when it may): it must speak for the
        broker its link proved itself as, and never for this master's own id."""
        if peer.broker_id is not None and hello.broker_id != peer.broker_id:
            return f"the link opened as broker {peer.broker_id}, its HELLO names {hello.broker_id}"
        own = self._broker.config.broker_id
        if hello.broker_id < 0 or hello.broker_id == own:
            return f"broker id {hello.broker_id} cannot be a slave of this master (id {own})"
        return ""

    def _replace(self, broker_id: int, task: asyncio.Task[Any], peer: str) -> None:
        """One live link per slave: a new one (a restarted slave whose old connection the master
        has not yet seen die) replaces the old."""
        old = self._by_id.get(broker_id)
        if old is not None and old is not task and not old.done():
            log.warning("a new link of slave %d from %s replaces its previous one", broker_id, peer)
            old.cancel()
        self._by_id[broker_id] = task

    def _hello(self, hello: ha.HaHello) -> tuple[ha.HaHelloReply, int]:
        """Where the slave's copy goes on (a probe: only who this master is: its cluster,
        epochs and end); raises ReplicaRefused."""
        broker = self._broker
        if broker.role is not Role.MASTER:
            raise ReplicaRefused(f"broker {broker.name!r} is not a master")
        if hello.group != broker.ha.replica_log.group:
            raise ReplicaRefused(
                f"this master is of group {broker.ha.replica_log.group!r}, not {hello.group!r}"
            )
        refusal = broker.ha.replication.write_refusal()
        if refusal:  # its slaves must be free to elect a new master (docs/replication.md §9)
            raise ReplicaRefused(f"broker {broker.name!r} takes no writes now: {refusal}")
        replica_log = broker.ha.replica_log
        if hello.probe:
            epochs_now = [ha.HaEpoch(number, start) for number, start in replica_log.epochs()]
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
        body = ha.HaMetadata(self._broker.ha.state_copy.files())
        for stream in list(self._streams.values()):
            with contextlib.suppress(ConnectionError, OSError):
                stream.send(FrameKind.ONEWAY, RequestCode.HA_METADATA, body)

    def _handle(self, stream: FrameStream, key: object, link: _Link, frame: Frame) -> None:
        broker = self._broker
        if frame.code == RequestCode.HA_ACK:
            ack = decode_body(frame.body, ha.HaAck)
            reaches = None if not ack.controller else ack.controller == 1
            written = min(ack.written, link.sent)  # never more than it was sent
            broker.ha.replication.acked(key, written, min(ack.flushed, written), reaches)
        elif frame.code == RequestCode.HA_METADATA:
            reply = ha.HaMetadata(broker.ha.state_copy.files())
            stream.send(FrameKind.RESPONSE, Code.SUCCESS, reply, frame.request_id)
        elif frame.code == RequestCode.HA_OFFSETS:
            refusal = self._offsets_refusal(link)
            if refusal:
                self._refused(stream.peer, f"its consumer offsets: {refusal}")
                stream.send(
                    FrameKind.RESPONSE, Code.NO_PERMISSION, w.ErrorBody(refusal), frame.request_id
                )
                return
            handed = decode_body(frame.body, ha.HaOffsets)
            refused = broker.ha.state_copy.take_back(
                handed.offsets,
                handed.pop_state,
                lambda topic, queue: broker.queue_range(topic, queue)[1],
            )
            if refused:
                log.warning(
                    "slave %d handed back offsets beyond their queues' ends, not taken: %s",
                    link.broker_id,
                    ", ".join(sorted(refused)[:10]) + (" ..." if len(refused) > 10 else ""),
                )
            stream.send(FrameKind.RESPONSE, Code.SUCCESS, w.Empty(), frame.request_id)

    def _offsets_refusal(self, link: _Link) -> str:
        """Why a slave may not hand back consumer offsets ("" when it may): only a member of
        the group whose store was a copy of this master's (docs/replication.md §2)."""
        name = self._broker.name
        if not link.held_a_copy:
            return "its store was never a copy of this master's: it has no offsets to hand back"
        if not self._broker.ha.replication.is_member(link.broker_id):
            return f"broker {link.broker_id} is not (yet) a member of group {name!r} in etcd"
        return ""

    async def _stream_log(self, stream: FrameStream, link: _Link) -> None:
        replica_log = self._broker.ha.replica_log
        replication = self._broker.ha.replication
        position = link.sent
        while True:
            data = replica_log.read(position, self._chunk)
            chunk = ha.HaData(position, data, replica_log.end)
            stream.send(FrameKind.ONEWAY, RequestCode.HA_DATA, chunk)
            await stream.drain()
            if data:
                position += len(data)
                link.sent = position
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
