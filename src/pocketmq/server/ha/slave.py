"""The slave's side of replication: follow the master's log, and its state files.

The link is kept up for as long as this broker is a slave: a lost connection, a master that
restarts, a chunk that does not verify — each ends the link, and the next one resumes from the
last record this slave stored (docs/replication.md §2). Every few seconds the master's state files
come over the same link; when the link comes up, the offsets consumers committed here while the
master was away go the other way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

import msgspec

from pocketmq.broker import Broker
from pocketmq.broker.ha.replica_log import FollowPlan, Missing, ReplicaRefused
from pocketmq.broker.ha.replication import Role
from pocketmq.errors import Code, ProtocolError, StoreError
from pocketmq.protocol import Frame, FrameKind, RequestCode, decode_body
from pocketmq.protocol import replication as ha
from pocketmq.protocol import structs as w
from pocketmq.server.ha.handshake import LinkPolicy, open_link
from pocketmq.server.ha.stream import FrameStream

__all__ = ["HaClient"]

log = logging.getLogger("pocketmq.server.ha")

METADATA_INTERVAL = 3.0
"""How often a slave copies its master's state files (RocketMQ's slave synchronisation)."""
_RETRY_MIN, _RETRY_MAX = 0.1, 2.0
_SILENCE = 3.0
"""A master sends a heartbeat every second: a link silent this long is to a master that stopped
(frozen, or its machine gone without closing the connection), and the slave drops it (sooner
when ``ha_idle_timeout`` is lower; the master's side waits ``ha_idle_timeout``: §2, "Limits")."""

MasterAddress = Callable[[], Awaitable[list[str]]]
"""The replication addresses to try, in order."""


class HaClient:
    """Keeps one replication link to the group's master while the broker is a slave."""

    def __init__(
        self,
        broker: Broker,
        master: MasterAddress,
        own_address: Callable[[], str],
        *,
        metadata_interval: float = METADATA_INTERVAL,
        topics_changed: Callable[[], Awaitable[None]] | None = None,
        link_lost: Callable[[], Awaitable[None]] | None = None,
        tls: ssl.SSLContext | None = None,
        policy: LinkPolicy | None = None,
    ) -> None:
        self._broker = broker
        self._tls = tls  # verifies the master's certificate when the group uses TLS
        self._policy = policy or LinkPolicy()  # the cluster key, the handshake's limits
        self._topics_changed = topics_changed
        self._link_lost = link_lost
        self._master = master
        self._own_address = own_address
        self._metadata_interval = metadata_interval
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Frame]] = {}
        self._progress = broker.ha.replication
        self._stopping = False
        self._stream: FrameStream | None = None  # the current link or attempt
        self._linking_to = ""  # its address
        self._switched = False
        self._woken = asyncio.Event()
        self.links = 0

    def start(self) -> None:
        """Start following the master (a background task that reconnects until stopped)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="replication-slave")

    async def stop(self) -> None:
        """Stop following: a promotion, or shutdown."""
        task, self._task = self._task, None
        self._stopping = True
        # asyncio.wait_for (Python < 3.12) can swallow a cancellation that arrives as the
        # awaited call completes (the name-server call in _run): cancel until it is gone
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.1)

    def switch(self, address: str) -> None:
        """The group's master is at ``address`` now (its controller said so): drop a link, or an
        attempt, to any other master at once and connect there (docs/replication.md §9)."""
        if self._linking_to == address:
            return
        self._woken.set()  # a pause between attempts ends
        if self._stream is not None and self._linking_to:
            self._switched = True
            self._stream.writer.close()  # the link's frames end; _run connects again at once

    async def _run(self) -> None:
        delay = _RETRY_MIN
        while self._broker.role is Role.SLAVE and not self._stopping:
            self._switched = False
            for address in await self._master():
                links = self.links
                started = time.monotonic()
                try:
                    await self._follow(address)
                except (ConnectionError, OSError, ProtocolError, StoreError, ReplicaRefused) as exc:
                    if str(exc) != self._progress.link_error and not self._switched:
                        log.warning("replication from %s: %s", address, exc)
                    self._progress.link_error = str(exc)
                finally:
                    self._progress.master_address = ""
                    self._stream = None
                    self._linking_to = ""
                if time.monotonic() - started > 5:
                    delay = _RETRY_MIN  # the link worked for a while: retry at once
                if self.links > links or self._switched:
                    break  # it was a master, or another is: begin with the first candidate again
            if self._link_lost is not None:
                with contextlib.suppress(Exception):  # the master may have changed
                    await self._link_lost()
            if self._switched:
                delay = _RETRY_MIN
                continue  # the controller named another master: no pause
            self._woken.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._woken.wait()
            delay = min(_RETRY_MAX, delay * 2)

    def _opened(self, stream: FrameStream) -> None:
        self._stream = stream

    async def _follow(self, address: str) -> None:
        self._linking_to = address
        replica_log = self._broker.ha.replica_log
        link = await open_link(
            address,
            group=self._broker.name,
            broker_id=self._broker.config.broker_id,
            policy=self._policy,
            tls=self._tls,
            opened=self._opened,
            idle=min(_SILENCE, self._policy.idle_timeout),
        )
        stream = link.stream
        tasks: list[asyncio.Task[None]] = []
        try:
            had_copy = bool(replica_log.cluster_id())
            reply = await link.hello(self._hello(replica_log.missing()))
            replica_log.follow(
                FollowPlan(
                    reply.cluster_id,
                    [(e.number, e.start) for e in reply.epochs],
                    reply.truncate_to,
                    reply.start,
                ),
            )
            self._progress.master_address = address
            self.links += 1
            self._progress.link_error = ""
            log.info("replicating from %s at offset %d", address, reply.start)
            self._ack(stream)
            tasks.append(asyncio.create_task(self._sync_metadata(stream, had_copy)))
            async for frame in link.frames:
                if frame.kind == FrameKind.RESPONSE:
                    waiter = self._pending.pop(frame.request_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(frame)
                elif frame.code == RequestCode.HA_METADATA:  # pushed: topics or groups changed
                    await self._apply(decode_body(frame.body, ha.HaMetadata).files)
                elif frame.code == RequestCode.HA_DATA:
                    data = decode_body(frame.body, ha.HaData)
                    self._progress.heard_from_master(data.log_end)
                    if data.data:  # acknowledged once in the log, before it is dispatched
                        replica_log.append(data.offset, data.data, lambda _end: self._ack(stream))
                    else:
                        self._ack(stream)  # a heartbeat too: it carries the controller flag
                    if replica_log.has_hole():
                        # a damaged record was set aside while serving: copy it again
                        raise ConnectionError("a record of this slave's log was set aside")
            raise ConnectionError("the master closed the replication link")
        finally:
            for task in tasks:
                task.cancel()
            for waiter in self._pending.values():
                waiter.cancel()
            self._pending.clear()
            await stream.close()

    def _hello(self, missing: Missing | None) -> ha.HaHello:
        """Who this slave is and what it holds: its log up to the first record it lacks (a
        replica never has holes: what a repair set aside is copied again, §4)."""
        replica_log = self._broker.ha.replica_log
        whole = replica_log.end
        end = whole if missing is None else min(whole, missing.start)
        epochs = [ha.HaEpoch(n, begin) for n, begin in replica_log.epochs() if begin < end]
        if end == whole:
            epochs = [ha.HaEpoch(n, begin) for n, begin in replica_log.epochs()]
        return ha.HaHello(
            self._broker.name,
            replica_log.cluster_id(),
            self._broker.config.broker_id,
            self._own_address(),
            end,
            epochs,
            missing.until if missing is not None else 0,
        )

    def _ack(self, stream: FrameStream) -> None:
        replica_log = self._broker.ha.replica_log
        flag = {None: 0, True: 1, False: 2}[self._progress.reaches_controller]
        ack = ha.HaAck(replica_log.end, replica_log.flushed, flag)
        stream.send(FrameKind.ONEWAY, RequestCode.HA_ACK, ack)

    async def _request(self, stream: FrameStream, code: RequestCode, body: msgspec.Struct) -> Frame:
        request_id = stream.send(FrameKind.REQUEST, code, body)
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        await stream.drain()
        async with asyncio.timeout(30.0):  # not wait_for: it can swallow a cancellation
            return await waiter

    async def _apply(self, files: dict[str, bytes]) -> None:
        if self._broker.ha.state_copy.apply(files) and self._topics_changed is not None:
            await self._topics_changed()  # the name server learns this slave's topics

    async def _sync_metadata(self, stream: FrameStream, had_copy: bool) -> None:
        """Hand this slave's offsets back (when its store held a copy before this link; again
        each round until the master takes them — under a controller, once etcd lists this
        broker as a member), and copy the master's state files regularly."""
        progress = self._progress
        offsets, pop_state = self._broker.ha.state_copy.handed_back(acted=progress.acting)
        handed = ha.HaOffsets(offsets, pop_state) if had_copy else None
        told = False
        while True:
            if handed is not None:
                answer = await self._request(stream, RequestCode.HA_OFFSETS, handed)
                if answer.code == Code.SUCCESS:
                    handed = None
                elif not told:
                    remark = decode_body(answer.body, w.ErrorBody).remark
                    log.warning("the master did not take this slave's offsets: %s", remark)
                    told = True
            if progress.acting:
                progress.acting = False
                log.info("the master is back: it serves pops again")
            frame = await self._request(stream, RequestCode.HA_METADATA, w.Empty())
            if frame.code == Code.SUCCESS:
                await self._apply(decode_body(frame.body, ha.HaMetadata).files)
            await asyncio.sleep(self._metadata_interval)
