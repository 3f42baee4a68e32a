"""The probe a master makes of a claimed newer master (docs/replication.md §6) opens the link as a
slave does (server/ha/handshake.py): with the cluster key, a replication port that cannot prove
it is never believed, whatever role and epoch it claims, and learns nothing of the prober's log;
a real master of the group that proves it is. Issue 28 finding 1's rule on finding 2's
handshake: a rogue without the key can never make a master step down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pocketmq.broker import Broker, BrokerConfig
from pocketmq.errors import Code
from pocketmq.protocol import FrameKind, RequestCode
from pocketmq.protocol import replication as ha
from pocketmq.server.auth.cluster import ClusterKey
from pocketmq.server.ha.handshake import LinkPolicy
from pocketmq.server.ha.master import HaServer
from pocketmq.server.ha.roles import Claim, GroupRole
from pocketmq.server.ha.stream import FrameStream
from pocketmq.store.identity import StoreIdentity, read_identity, write_identity

KEY = ClusterKey(("a" * 64,))
OTHER = ClusterKey(("b" * 64,))
CLAIMED_EPOCH = 7


async def _nothing() -> None:
    return None


def group_role(broker: Broker, key: ClusterKey | None) -> GroupRole:
    """The prober's side: what a running master holds (its broker, the group's policy)."""
    return GroupRole(
        broker,
        host="127.0.0.1",
        ha_port=0,
        master=None,
        own_address=lambda: "127.0.0.1:1",
        advertise=lambda host, port: f"{host}:{port}",
        on_change=_nothing,
        policy=LinkPolicy(key=key),
    )


@pytest.fixture
async def prober(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path / "a"), broker_name="g1"))
    await broker.start()
    broker.replica_log.ensure_identity()
    yield broker
    await broker.close()


@pytest.fixture
async def claimed(tmp_path: Path, prober: Broker) -> AsyncIterator[Broker]:
    """A real master of the same group and cluster, at a newer epoch."""
    broker = Broker(BrokerConfig(data_dir=str(tmp_path / "b"), broker_name="g1", broker_id=1))
    await broker.start()
    identity = read_identity(prober.store.directory)
    assert identity is not None
    write_identity(broker.store.directory, identity)
    broker.store.epochs.begin(CLAIMED_EPOCH, broker.store.write_position)
    yield broker
    await broker.close()


async def serve(broker: Broker, key: ClusterKey | None) -> tuple[HaServer, str]:
    server = HaServer(broker, policy=LinkPolicy(key=key))
    await server.start("127.0.0.1", 0)
    return server, f"127.0.0.1:{server.port}"


class RoguePort:
    """A replication port that claims to be the group's master at epoch 99 without holding the
    cluster key: it answers HA_LINK (saying it authenticates, or not), answers a proof with a
    made-up one, and would answer a probe's HA_HELLO with the prober's own cluster id."""

    def __init__(self, *, authenticates: bool, cluster_id: str) -> None:
        self.authenticates = authenticates
        self.cluster_id = cluster_id
        self.codes: list[int] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer)
        try:
            async for frame in stream.frames(5.0):
                self.codes.append(frame.code)
                stream.send(FrameKind.RESPONSE, Code.SUCCESS, self._answer(frame.code),
                            frame.request_id)  # fmt: skip
                await stream.drain()
        except ConnectionError:
            pass
        finally:
            await stream.close()

    def _answer(self, code: int) -> ha.HaLinkChallenge | ha.HaLinkProof | ha.HaHelloReply:
        if code == RequestCode.HA_LINK:
            challenge = "c" * 32 if self.authenticates else ""
            return ha.HaLinkChallenge(self.authenticates, challenge, "ha:g1", "master", 99)
        if code == RequestCode.HA_LINK_PROOF:
            return ha.HaLinkProof("0" * 64)
        return ha.HaHelloReply(self.cluster_id, [ha.HaEpoch(99, 0)], -1, 0)


async def test_a_master_of_the_group_that_proves_the_key_is_confirmed(
    prober: Broker, claimed: Broker
) -> None:
    server, address = await serve(claimed, KEY)
    try:
        verdict = await group_role(prober, KEY).verify_master(address, own_epoch=1)
        await asyncio.sleep(0.05)
        assert not claimed.replication.slaves  # a probe is answered, never taken for a slave
    finally:
        await server.close()
    assert verdict is Claim.CONFIRMED


@pytest.mark.parametrize("authenticates", [True, False], ids=["bogus-proof", "no-key-asked"])
async def test_a_rogue_port_without_the_key_is_never_believed(
    prober: Broker, authenticates: bool
) -> None:
    rogue = RoguePort(authenticates=authenticates, cluster_id=prober.replica_log.cluster_id())
    async with rogue as address:
        verdict = await group_role(prober, KEY).verify_master(address, own_epoch=1)
        await asyncio.sleep(0.05)
    assert verdict is Claim.DISPROVED
    assert RequestCode.HA_HELLO not in rogue.codes  # it learned nothing of the prober's log


async def test_a_master_holding_another_key_is_not_believed(
    prober: Broker, claimed: Broker
) -> None:
    server, address = await serve(claimed, OTHER)
    try:
        verdict = await group_role(prober, KEY).verify_master(address, own_epoch=1)
    finally:
        await server.close()
    assert verdict is Claim.DISPROVED


async def test_an_older_or_fenced_master_or_none_makes_nobody_step_down(
    prober: Broker, claimed: Broker
) -> None:
    server, address = await serve(claimed, KEY)
    role = group_role(prober, KEY)
    try:
        assert await role.verify_master(address, own_epoch=CLAIMED_EPOCH) is Claim.DISPROVED
        claimed.replication.fence = "waiting for its name server"  # it may not write now
        assert await role.verify_master(address, own_epoch=1) is Claim.UNVERIFIED
    finally:
        await server.close()
    assert await role.verify_master(address, own_epoch=1) is Claim.UNVERIFIED  # nobody there


async def test_without_authentication_the_probe_still_checks_the_cluster(
    prober: Broker, claimed: Broker
) -> None:
    """No key on either side (a private network): the claimed master's cluster id and epochs
    decide, as before the handshake existed."""
    server, address = await serve(claimed, None)
    role = group_role(prober, None)
    try:
        assert await role.verify_master(address, own_epoch=1) is Claim.CONFIRMED
        write_identity(claimed.store.directory, StoreIdentity("g1", "another-cluster"))
        assert await role.verify_master(address, own_epoch=1) is Claim.DISPROVED
    finally:
        await server.close()
