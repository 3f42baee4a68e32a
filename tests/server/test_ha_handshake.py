"""The replication link's handshake (server/ha/handshake.py), both ends over real sockets in one
process: the cluster key's mutual proofs, a rogue master that cannot prove it, a relay, a key
rotation, and the refusals each side gives (docs/replication.md §2, "Handshake")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pocketmq.broker.ha.replica_log import ReplicaRefused
from pocketmq.errors import Code
from pocketmq.protocol import FrameKind, RequestCode
from pocketmq.protocol import replication as ha
from pocketmq.server.auth.cluster import ClusterKey
from pocketmq.server.ha.handshake import (
    HaLink,
    LinkPolicy,
    LinkRefused,
    Peer,
    accept_link,
    open_link,
)
from pocketmq.server.ha.stream import FrameStream

KEY = ClusterKey(("a" * 64,))
OTHER = ClusterKey(("b" * 64,))


class Master:
    """A replication port that runs ``accept_link`` and records what it concluded."""

    def __init__(self, policy: LinkPolicy, group: str = "g1") -> None:
        self.policy = policy
        self.group = group
        self.peers: list[Peer] = []
        self.refusals: list[str] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Master:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer)
        try:
            peer, hello = await accept_link(
                stream,
                stream.frames(5.0),
                group=self.group,
                policy=self.policy,
                standing=lambda: ("master", 3),
            )
            assert hello.code == RequestCode.HA_HELLO
            self.peers.append(peer)
        except LinkRefused as exc:
            self.refusals.append(str(exc))
        except ConnectionError:
            pass
        finally:
            await stream.close()


async def follow(address: str, key: ClusterKey | None, group: str = "g1") -> HaLink:
    """The slave's side up to HA_HELLO, which it then sends (as HaClient does)."""
    link = await open_link(address, group=group, broker_id=1, policy=LinkPolicy(key=key))
    hello = ha.HaHello(group, "", 1, "127.0.0.1:1", 0, [])
    link.stream.send(FrameKind.REQUEST, RequestCode.HA_HELLO, hello)
    await link.stream.drain()
    return link


async def settle(master: Master) -> None:
    for _ in range(100):
        if master.peers or master.refusals:
            return
        await asyncio.sleep(0.01)


async def test_both_ends_prove_the_same_key() -> None:
    async with Master(LinkPolicy(key=KEY)) as master:
        link = await follow(master.address, KEY)
        await settle(master)
        await link.close()
    assert link.authenticated
    assert (link.master_role, link.master_epoch) == ("master", 3)
    assert master.peers == [Peer("g1", 1, True)]


@pytest.mark.parametrize(
    ("master_key", "slave_key", "reason"),
    [
        (KEY, None, "requires the cluster key"),
        (KEY, OTHER, "does not verify"),
        (None, KEY, "does not authenticate its slaves"),
    ],
)
async def test_a_mismatch_is_refused_with_the_reason(
    master_key: ClusterKey | None, slave_key: ClusterKey | None, reason: str
) -> None:
    async with Master(LinkPolicy(key=master_key)) as master:
        with pytest.raises(ReplicaRefused, match=reason):
            await follow(master.address, slave_key)
        await asyncio.sleep(0.05)
    assert master.peers == []


async def test_another_groups_master_is_refused() -> None:
    async with Master(LinkPolicy(key=KEY), group="g2") as master:
        with pytest.raises(ReplicaRefused, match="not 'g1'"):
            await follow(master.address, KEY)


async def test_a_rotated_key_still_links_one_side_at_a_time() -> None:
    rotated = ClusterKey(("c" * 64, KEY.current))  # the master has the new key first
    async with Master(LinkPolicy(key=rotated)) as master:
        link = await follow(master.address, KEY)  # the slave still has the old one only
        await settle(master)
        await link.close()
    assert link.authenticated
    assert master.peers == [Peer("g1", 1, True)]


async def test_a_relay_between_slave_and_master_is_refused() -> None:
    async with Master(LinkPolicy(key=KEY)) as master, relay(master.address) as through:
        with pytest.raises(ReplicaRefused, match="relay"):
            await follow(through, KEY)
        await settle(master)
    assert master.peers == []


async def test_a_rogue_master_that_cannot_prove_the_key_gets_no_hello() -> None:
    received: list[int] = []

    async def rogue(stream: FrameStream, frames: AsyncIterator) -> None:
        async for frame in frames:
            received.append(frame.code)
            if frame.code == RequestCode.HA_LINK:
                reply = ha.HaLinkChallenge(True, "c" * 32, "ha:g1", "master", 99)
            else:  # whatever the slave proved, answer with a proof made up
                reply = ha.HaLinkProof("0" * 64)
            stream.send(FrameKind.RESPONSE, Code.SUCCESS, reply, frame.request_id)

    async with serving(rogue) as address:
        with pytest.raises(ReplicaRefused, match="did not prove"):
            await follow(address, KEY)
        await asyncio.sleep(0.05)
    assert received == [RequestCode.HA_LINK, RequestCode.HA_LINK_PROOF]  # no HA_HELLO


async def test_a_master_that_never_answers_is_given_up_within_the_handshake_timeout() -> None:
    async def silent(stream: FrameStream, frames: AsyncIterator) -> None:
        await asyncio.sleep(10)

    async with serving(silent) as address:
        started = asyncio.get_running_loop().time()
        policy = LinkPolicy(key=KEY, handshake_timeout=0.3)
        with pytest.raises(ConnectionError, match="handshake"):
            await open_link(address, group="g1", broker_id=1, policy=policy)
        assert asyncio.get_running_loop().time() - started < 2


@contextlib.asynccontextmanager
async def serving(
    handler: Callable[[FrameStream, AsyncIterator], Awaitable[None]],
) -> AsyncIterator[str]:
    tasks: list[asyncio.Task[None]] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer)
        try:
            await handler(stream, stream.frames())
        finally:
            await stream.close()

    server = await asyncio.start_server(
        lambda r, w: tasks.append(asyncio.ensure_future(accept(r, w))), "127.0.0.1", 0
    )
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def relay(target: str) -> AsyncIterator[str]:
    """A TCP proxy: what a rogue in the middle forwarding frames both ways looks like."""
    host, _, port = target.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    tasks: list[asyncio.Task[None]] = []
    server = await asyncio.start_server(
        lambda r, w: tasks.append(asyncio.ensure_future(accept(r, w))), "127.0.0.1", 0
    )
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        server.close()
        await server.wait_closed()
