"""Issue 28, findings 1 and 6 (native port and name server), tried as an attacker would: a real
broker with ``--authentication --authorization`` (and again with TLS), its embedded name server,
and hostile peers speaking the real protocol (tests/security/peers.py).

(a) a rogue cannot register a broker at the name server, without or with a user's credentials,
    so no route lists it and producers never reach it; (b) a relay between a client and the
    real broker gains no session; (c) a fake broker is refused by every client holding
    credentials; (d) the real clients keep working; (e) connections that never authenticate
    cannot lock users out or fill the buffer budget, time out, and wrong logins are throttled.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from pocketmq import Message
from pocketmq.client import Admin, ClientConfig, Producer, SimpleConsumer
from pocketmq.client.connection import close_quietly, connect
from pocketmq.client.sync import SyncAdmin
from pocketmq.errors import (
    Code,
    NoPermissionError,
    ServerIdentityError,
    TooManyRequestsError,
)
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_dir
from .peers import FakeBroker, RawPeer, Relay, remark

pytestmark = pytest.mark.integration

ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")
MAX_CONNECTIONS = 64
HELLO_TIMEOUT = 2.0


@dataclass
class Cluster:
    """The broker under attack, and how its real clients reach it."""

    broker: BrokerProcess
    tls: ssl.SSLContext | None
    ca_file: str
    server_tls: ssl.SSLContext | None  # what a fake broker serves (the broker's own cert)

    def client(self, keys: tuple[str, str] = ROOT, **options: Any) -> ClientConfig:
        return ClientConfig(
            servers=(options.pop("server", self.broker.address),),
            tls=self.tls,
            access_key=keys[0],
            secret_key=keys[1],
            **options,
        )

    def cli(
        self, *args: str, server: str = "", keys: tuple[str, str] = ROOT
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "POCKETMQ_SERVER": server or self.broker.address}
        env |= {"POCKETMQ_ACCESS_KEY": keys[0], "POCKETMQ_SECRET_KEY": keys[1]}
        env.pop("POCKETMQ_TLS_CA", None)
        if self.ca_file:
            env["POCKETMQ_TLS_CA"] = self.ca_file
        command = [sys.executable, "-m", "pocketmq", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def _pocketmq(data: Path, *args: str) -> None:
    command = [sys.executable, "-m", "pocketmq", *args, "--data-dir", str(data)]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def _users(data: Path) -> None:
    _pocketmq(data, "user", "create", ROOT[0], "--secret", ROOT[1], "--type", "super")
    _pocketmq(data, "user", "create", ALICE[0], "--secret", ALICE[1])
    _pocketmq(data, "acl", "grant", ALICE[0], "Topic:orders*", "--actions", "Pub,Sub")
    _pocketmq(data, "acl", "grant", ALICE[0], "Group:billing*", "--actions", "Sub")


@pytest.fixture(scope="module", params=["plain", "tls"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Cluster]:
    with scratch_dir(tmp_path_factory, f"trust-{request.param}") as root:
        _users(root / "data")
        extra = ["--authentication", "--authorization"]
        tls = server_tls = None
        ca_file = ""
        if request.param == "tls":
            authority = trustme.CA()
            certificate = authority.issue_cert("127.0.0.1")
            chain, key = root / "chain.pem", root / "key.pem"
            certificate.private_key_and_cert_chain_pem.write_to_path(str(chain))
            certificate.private_key_pem.write_to_path(str(key))
            authority.cert_pem.write_to_path(ca_file := str(root / "ca.pem"))
            extra += ["--tls-cert", str(chain), "--tls-key", str(key)]
            tls = ssl.create_default_context(cafile=ca_file)
            server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_tls.load_cert_chain(str(chain), str(key))
        config = {
            **FAST_BROKER,
            "server": {"max_connections": MAX_CONNECTIONS, "hello_timeout": HELLO_TIMEOUT},
        }
        with BrokerProcess(root, config=config, extra_args=tuple(extra)) as broker:
            cluster = Cluster(broker, tls, ca_file, server_tls)
            with SyncAdmin(client=cluster.client()) as admin:
                admin.create_topic("orders-a", queues=4)
            yield cluster
            assert broker.stop() == 0, broker.log()[-3000:]


async def _topics(cluster: Cluster) -> set[str]:
    async with Admin(client=cluster.client()) as admin:
        return {t.name for t in await admin.list_topics()}


def _rogue(name: str, address: str, *, epoch: int = 99) -> w.RegisterBrokerRequest:
    """A registration claiming ``name``'s mastership at ``address`` (a higher epoch than the
    real master's, as in the finding), with the topic producers use."""
    me = w.BrokerAddress(name, address, "", 0, "master", epoch, address)
    return w.RegisterBrokerRequest(me, [w.TopicSpec("orders-a", 8, "normal", 6)])


# -- (a) registrations ---------------------------------------------------------------------


async def test_a_rogue_broker_cannot_register_and_producers_never_reach_it(
    cluster: Cluster,
) -> None:
    namesrv = cluster.broker.namesrv
    async with FakeBroker(challenge=False, tls=cluster.server_tls) as rogue:
        # no credential: the name server answers nothing but the handshake
        peer = await RawPeer.open(namesrv, cluster.tls)
        try:
            hello = await peer.hello()
            assert hello.auth_challenge, "the name server must ask who it is talking to"
            for group in ("broker-a", "rogue"):
                refused = await peer.request(
                    RequestCode.REGISTER_BROKER, _rogue(group, rogue.address)
                )
                assert refused.code == Code.NO_PERMISSION, remark(refused)
            listed = await peer.request(RequestCode.LIST_BROKERS, w.Empty())
            assert listed.code == Code.NO_PERMISSION
        finally:
            await peer.aclose()
        # a user's credential (even a super user's) authenticates, but registers nothing
        for keys in (ALICE, ROOT):
            config = cluster.client(keys)
            connection = await connect(
                namesrv,
                "rogue",
                timeout=5,
                tls=config.ssl_context(),
                credentials=keys,
            )
            try:
                for group in ("broker-a", "rogue"):
                    with pytest.raises(NoPermissionError, match="may not ask"):
                        await connection.request(
                            RequestCode.REGISTER_BROKER,
                            _rogue(group, rogue.address),
                            w.RegisterBrokerResponse,
                            5,
                        )
                # users may read routes: the real broker alone
                route = await connection.request(
                    RequestCode.GET_ROUTE, w.GetRouteRequest("orders-a"), w.RouteResponse, 5
                )
                assert {b.address for b in route.brokers} == {cluster.broker.address}
                assert [b.epoch for b in route.brokers] != [99]
            finally:
                await close_quietly(connection)
        # producers routed through the name server reach the real broker only
        config = cluster.client(ALICE, server=namesrv)
        async with Producer(client=config) as producer:
            results = [
                await producer.send(Message(topic="orders-a", body=b"%d" % n)) for n in range(20)
            ]
        assert {r.broker_name for r in results} == {"broker-a"}
        assert rogue.connections == 0


# -- (b) a relay -----------------------------------------------------------------------------


async def test_a_relay_between_a_client_and_the_broker_gains_no_session(cluster: Cluster) -> None:
    before = await _topics(cluster)
    async with Relay(cluster.broker.address) as relay:
        created = await asyncio.to_thread(
            cluster.cli, "topic", "create", "orders-relayed", server=relay.address
        )
        assert created.returncode != 0, created.stdout
        assert "not an address of this server" in created.stderr
        with pytest.raises(NoPermissionError, match="not an address of this server"):
            async with Admin(client=cluster.client(server=relay.address)) as admin:
                await admin.delete_topic("orders-a")
        assert relay.connections >= 2  # the bytes did reach the broker, both ways
    assert await _topics(cluster) == before
    assert "orders-a" in before


# -- (c) a fake broker ---------------------------------------------------------------------


@pytest.mark.parametrize("challenge", [False, True], ids=["no-challenge", "wrong-proof"])
async def test_a_fake_broker_is_refused_by_clients_holding_credentials(
    cluster: Cluster, challenge: bool
) -> None:
    async with FakeBroker(challenge=challenge, tls=cluster.server_tls) as fake:
        with pytest.raises(ServerIdentityError, match="not the broker you meant"):
            async with Admin(client=cluster.client(server=fake.address)) as admin:
                await admin.create_topic("orders-fake", queues=1)
        with pytest.raises(ServerIdentityError):
            async with Producer(client=cluster.client(ALICE, server=fake.address)) as producer:
                await producer.send(Message(topic="orders-a", body=b"secret"))
        created = await asyncio.to_thread(
            cluster.cli, "topic", "create", "orders-fake", server=fake.address
        )
        assert created.returncode != 0
        assert "did not prove it knows your secret" in created.stderr or (
            "asks for no authentication" in created.stderr
        )
        assert fake.requests == [], "nothing but the handshake may reach a server not verified"


# -- (d) the real clients --------------------------------------------------------------------


async def test_the_real_clients_keep_working(cluster: Cluster) -> None:
    # a lone broker with authentication made its cluster key at its first start, private
    key = cluster.broker.data_dir / "data" / "config" / "cluster.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    async with Admin(client=cluster.client()) as admin:
        await admin.create_topic("orders-d", queues=2)
        await admin.create_group("billing-d")
    async with Producer(client=cluster.client(ALICE, server=cluster.broker.namesrv)) as producer:
        sent = await producer.send(Message(topic="orders-d", body=b"through the name server"))
    assert sent.broker_name == "broker-a"
    async with SimpleConsumer(
        "billing-d", "orders-d", client=cluster.client(ALICE), await_duration=0.5
    ) as consumer:
        received = []
        for _ in range(20):
            received += await consumer.receive(8)
            if received:
                break
        assert [m.body for m in received] == [b"through the name server"]
        await consumer.ack(received[0])
    for args in (("cluster", "list"), ("broker", "status"), ("topic", "create", "orders-cli")):
        done = await asyncio.to_thread(cluster.cli, *args)
        assert done.returncode == 0, (args, done.stderr)
    listed = await asyncio.to_thread(cluster.cli, "cluster", "list", server=cluster.broker.namesrv)
    assert listed.returncode == 0, listed.stderr
    assert "broker-a" in listed.stdout
    if cluster.tls is None:  # the official client over TLS: tests/server/test_tls.py
        await asyncio.to_thread(_official_send, cluster)


def _official_send(cluster: Cluster) -> None:
    from rocketmq import ClientConfiguration, Credentials
    from rocketmq import Producer as OfficialProducer

    from ..grpc.conftest import message

    configuration = ClientConfiguration(cluster.broker.grpc, Credentials(*ALICE))
    producer = OfficialProducer(configuration, ("orders-d",))
    producer.startup()
    try:
        assert producer.send(message("orders-d", b"official")).message_id
    finally:
        producer.shutdown()


# -- (e) resources held before login ----------------------------------------------------------


async def test_idle_unauthenticated_connections_lock_nobody_out(cluster: Cluster) -> None:
    """As many idle connections as ``max_connections`` (HELLO, never AUTHENTICATE), and eight
    announcing 16 MiB frames: a real user still gets in and sends a 1 MiB message."""
    idle = [await RawPeer.open(cluster.broker.address, cluster.tls) for _ in range(8)]
    try:
        for peer in idle:
            assert (await peer.hello()).auth_challenge
            # the header of a 16 MiB SEND: refused as soon as it is read
            await peer.send(b"\x08\x00\x00\x01\x00\x00\x0a\x00\x07\x00\x00\x00")
        for peer in idle:  # a frame that large is refused before authentication
            frames = await peer.until_closed()
            assert frames
            assert frames[-1].code == Code.PROTOCOL_ERROR
        for _ in range(MAX_CONNECTIONS):
            peer = await RawPeer.open(cluster.broker.address, cluster.tls)
            idle.append(peer)
            await peer.hello()
        async with Producer(client=cluster.client(ALICE)) as producer:
            sent = await producer.send(Message(topic="orders-a", body=b"m" * (1 << 20)))
        assert sent.broker_name == "broker-a"
        evicted = 0
        for peer in idle[8:]:
            await peer.read_for(0.05)
            evicted += any(f.code == Code.TOO_MANY_REQUESTS for f in peer.frames)
        assert evicted >= MAX_CONNECTIONS * 3 // 4 - 1  # the oldest made room for newer ones
    finally:
        await asyncio.gather(*(peer.aclose() for peer in idle))


async def test_name_server_connections_time_out_and_are_capped(cluster: Cluster) -> None:
    namesrv = cluster.broker.namesrv
    idle: list[RawPeer] = []
    try:
        for _ in range(MAX_CONNECTIONS):
            idle.append(peer := await RawPeer.open(namesrv, cluster.tls))
            assert (await peer.hello()).auth_challenge
        started = time.monotonic()
        async with Admin(client=cluster.client(ALICE, server=namesrv)) as admin:
            brokers = await admin.brokers()
        assert [b.name for b in brokers] == ["broker-a"]
        # the last ones, never evicted, are closed by the handshake's deadline
        frames = await idle[-1].until_closed(timeout=HELLO_TIMEOUT + 5)
        assert time.monotonic() - started < HELLO_TIMEOUT + 3
        assert "not authenticated within" in remark(frames[-1])
    finally:
        await asyncio.gather(*(peer.aclose() for peer in idle))


async def test_wrong_logins_are_throttled_one_guess_per_connection(cluster: Cluster) -> None:
    """Runs last for its broker: it empties 127.0.0.1's bucket."""
    peer = await RawPeer.open(cluster.broker.address, cluster.tls)
    await peer.hello()
    guess = w.AuthenticateRequest(ROOT[0], "0" * 64, "127.0.0.1:1")
    first = await peer.request(RequestCode.AUTHENTICATE, guess)
    assert first.code == Code.NO_PERMISSION
    await peer.until_closed()  # one guess per connection
    await peer.aclose()
    codes = []
    started = time.monotonic()
    for _ in range(30):
        peer = await RawPeer.open(cluster.broker.address, cluster.tls)
        try:
            await peer.hello()
            codes.append((await peer.request(RequestCode.AUTHENTICATE, guess)).code)
            await peer.until_closed()
        finally:
            await peer.aclose()
    elapsed = time.monotonic() - started
    refused = codes.count(Code.NO_PERMISSION)
    assert refused <= 9 + elapsed + 1, codes  # the burst, then about one per second
    assert codes[-1] == Code.TOO_MANY_REQUESTS
    # a right secret from the same address waits for its turn, like everyone there
    with pytest.raises(TooManyRequestsError, match="too many failed logins"):
        async with Admin(client=cluster.client()) as admin:
            await admin.list_topics()
    await asyncio.sleep(1.2)
    async with Admin(client=cluster.client()) as admin:
        assert "orders-a" in {t.name for t in await admin.list_topics()}
