"""Issue 28, finding 2: the replication port trusts only who proves the cluster key.

Real broker processes started with ``--authentication --authorization`` (and a TLS variant with
mutual TLS); the attacker is :class:`FakeSlave`, a small peer speaking the port's real frames.
Without the key it reads no log byte, moves no consumer offset, and its acknowledgements (or
its silence) change no send's answer; a member that holds the key but hangs holds a send for
at most ``ha_sync_timeout`` and readers for at most ``ha_max_lag_time`` (it leaves the in-sync
set then); a real slave with the key replicates, one with another
key or behind a relay is refused and says why; the master serves throughout
(docs/security.md, "Replication port"; docs/replication.md §2).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from pocketmq import Message
from pocketmq.client import Admin, ClientConfig, Producer, SendResult, SendStatus
from pocketmq.errors import Code
from pocketmq.protocol import Frame, decode_body
from pocketmq.protocol import replication as ha
from pocketmq.server.auth.cluster import ClusterKey, create_cluster_key
from pocketmq.testing import BrokerProcess, EtcdProcess

from ..integration.conftest import FAST_BROKER, eventually
from ..replication.conftest import LinkProxy
from ..scratch import scratch_dir
from .fake_slave import FakeSlave, refusal

pytestmark = pytest.mark.integration

SECRET = "root-secret-for-tests"
SYNC_TIMEOUT = 1.0  # the group's ha_sync_timeout: how long one SYNC send waits
LAG_TIME = 2.0  # its ha_max_lag_time: a silent slave leaves the in-sync set this long after
# it was last caught up (longer than SYNC_TIMEOUT: a send made just after it fell silent waits)


def sync_config(**server: Any) -> dict[str, dict[str, Any]]:
    return {
        "broker": {
            **FAST_BROKER["broker"],
            "replication": "sync",
            "ha_sync_timeout": SYNC_TIMEOUT,
            "ha_max_lag_time": LAG_TIME,
            "ha_metadata_interval": 0.3,
        },
        "store": dict(FAST_BROKER["store"]),
        "server": {"ha_handshake_timeout": 1.0, **server},
    }


def secured(root: Path, group: str, key: Path, *extra: str, **options: Any) -> BrokerProcess:
    """A broker with authentication, authorization and the cluster key ``key``, and a super
    user for the test's clients."""
    options.setdefault("config", sync_config())
    broker = BrokerProcess(
        root,
        broker_name=group,
        grpc_port=None,
        extra_args=("--authentication", "--authorization", "--cluster-key", str(key), *extra),
        **options,
    )
    command = [sys.executable, "-m", "pocketmq", "user", "create", "root", "--type", "super",
               "--secret", SECRET, "--data-dir", str(broker.data_dir / "data")]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    return broker


def succeeded(answer: Frame | None) -> Frame:
    """The master's answer, which must be a success."""
    assert answer is not None, "the master closed the link"
    assert answer.code == Code.SUCCESS, refusal(answer)
    return answer


def client(tls: ssl.SSLContext | None = None) -> ClientConfig:
    return ClientConfig(access_key="root", secret_key=SECRET, tls=tls)


async def send(broker: BrokerProcess, body: bytes, topic: str = "T", **tls: Any) -> SendResult:
    async with Producer(servers=broker.address, client=client(**tls)) as producer:
        return await producer.send(Message(topic=topic, body=body))


async def status(broker: BrokerProcess, **tls: Any) -> dict[str, Any]:
    async with Admin(servers=broker.address, client=client(**tls)) as admin:
        for item in await admin.broker_status():
            if item.address == broker.address:
                return dict(item.replication)
    raise AssertionError(f"{broker.address} did not answer its status")


async def committed(broker: BrokerProcess, group: str) -> int:
    async with Admin(servers=broker.address, client=client()) as admin:
        [queue] = await admin.queue_status("T", group)
    return queue.committed_offset


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ClusterKey, Path]:
    root = tmp_path_factory.mktemp("keys")
    key = create_cluster_key(root / "cluster.key")
    create_cluster_key(root / "wrong.key")
    return root / "cluster.key", key, root / "wrong.key"


async def _prepare(broker: BrokerProcess, groups: tuple[str, ...] = ()) -> None:
    """Topic T (one queue, a backlog of three) and ``groups`` at its start."""
    await asyncio.sleep(1.1)  # the broker reads a new users.json within a second
    async with Admin(servers=broker.address, client=client()) as admin:
        await admin.create_topic("T", queues=1)
        for group in groups:
            await admin.create_group(group)
    for n in range(3):
        await send(broker, f"backlog-{n}".encode())
    async with Admin(servers=broker.address, client=client()) as admin:
        for group in groups:
            await admin.reset_offset(group, "T", to="earliest")


@pytest.fixture(scope="module")
def lone(tmp_path_factory: pytest.TempPathFactory, keys: Any) -> Iterator[BrokerProcess]:
    """A master with no slave, its port limited to four connections."""
    with scratch_dir(tmp_path_factory, "lone") as root:
        config = sync_config(ha_max_connections=4)
        with secured(root, "lone", keys[0], config=config) as broker:
            asyncio.run(_prepare(broker, ("G", "G2")))
            yield broker


# -- a peer without the key -------------------------------------------------------------------


async def test_a_fake_slave_without_the_key_reads_no_log_byte(
    lone: BrokerProcess, keys: Any
) -> None:
    wrong = ClusterKey(("0" * 64,))
    attempts = {
        "a HELLO as before": lambda fake: fake.hello("lone", 1),
        "a link without a proof": lambda fake: _link_then_hello(fake, None),
        "a proof with another key": lambda fake: fake.link("lone", 1, wrong.current),
    }
    for name, attempt in attempts.items():
        fake = await FakeSlave.connect(lone.ha)
        try:
            answer = await attempt(fake)
            assert "cluster key" in refusal(answer), name
            await asyncio.wait_for(fake.closed.wait(), 5)  # the master ends the link
            assert fake.data_bytes == 0, name
        finally:
            await fake.close()
    assert (await send(lone, b"still serving")).status is SendStatus.SLAVE_NOT_AVAILABLE
    assert (await status(lone))["slaves"] == []


async def _link_then_hello(fake: FakeSlave, secret: str | None) -> Any:
    succeeded(await fake.link("lone", 1, secret))
    return await fake.hello("lone", 1)


async def test_a_fake_slave_moves_no_consumer_offset(lone: BrokerProcess) -> None:
    assert await committed(lone, "G") == 0
    for opening in ("hello", "link"):
        fake = await FakeSlave.connect(lone.ha)
        try:
            if opening == "hello":
                await fake.hello("lone", 1)
            else:
                await fake.link("lone", 1, None)
            await fake.offsets({"G@T@0": 1_000_000})  # would skip the group's whole backlog
        finally:
            await fake.close()
    await asyncio.sleep(0.3)
    assert await committed(lone, "G") == 0


async def test_a_fake_acknowledgement_makes_no_sync_send_ok(lone: BrokerProcess) -> None:
    fakes = [await FakeSlave.connect(lone.ha) for _ in range(2)]
    try:
        await fakes[0].hello("lone", 1)
        await fakes[1].link("lone", 2, "f" * 64)
        for fake in fakes:
            fake.ack(1 << 40)  # "I hold everything you will ever write"
        await asyncio.sleep(0.2)
        result = await send(lone, b"must not be called replicated")
        assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
        assert (await status(lone))["in_sync"] == 0
    finally:
        for fake in fakes:
            await fake.close()


async def test_a_silent_fake_slave_does_not_stall_sends(lone: BrokerProcess) -> None:
    fake = await FakeSlave.connect(lone.ha)
    try:
        await fake.hello("lone", 1)  # and then never a word
        for n in range(3):
            started = time.monotonic()
            result = await send(lone, f"not held {n}".encode())
            assert time.monotonic() - started < 0.8 * SYNC_TIMEOUT
            assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
    finally:
        await fake.close()


async def test_the_port_bounds_connections_that_prove_nothing(lone: BrokerProcess) -> None:
    """At most ``ha_max_connections`` (4 here): a new connection pushes out the oldest one
    still in its handshake; each gets ``ha_handshake_timeout`` (1 s here); before the handshake
    no frame over 64 KiB is read."""
    host, _, port = lone.ha.rpartition(":")
    opened = [await asyncio.open_connection(host, int(port)) for _ in range(5)]
    try:
        oldest = opened[0][0]
        assert await asyncio.wait_for(oldest.read(1), 1.0) == b""  # gave way to the fifth
        started = time.monotonic()
        for reader, _ in opened[1:]:
            assert await asyncio.wait_for(reader.read(1), 5.0) == b""
        assert time.monotonic() - started < 3.0
        reader, writer = await asyncio.open_connection(host, int(port))
        opened.append((reader, writer))
        # a frame header (docs/protocol.md, "Frames") announcing a 10 MiB HA_HELLO: refused
        # before any of its body is read, long before the handshake's deadline
        writer.write(struct.pack("<IBBHI", (10 << 20) + 8, 0, 0, 100, 1))
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(1), 1.0) == b""
        assert time.monotonic() - started < 0.5
    finally:
        for _, writer in opened:
            writer.close()
            await asyncio.gather(writer.wait_closed(), return_exceptions=True)
    assert (await send(lone, b"after the flood")).status is SendStatus.SLAVE_NOT_AVAILABLE


# -- a member that holds the key ----------------------------------------------------------


async def _member(broker: BrokerProcess, group: str, broker_id: int, key: ClusterKey,
                  *, copy: bool = False) -> FakeSlave:  # fmt: skip
    """A fake slave that proved the key and follows the log (acknowledging it); ``copy``:
    its HELLO names the master's store identity, as a slave that held a copy before."""
    cluster_id = ""
    if copy:
        scout = await FakeSlave.connect(broker.ha)
        succeeded(await scout.link(group, broker_id, key.current))
        answer = succeeded(await scout.hello(group, broker_id))
        cluster_id = decode_body(answer.body, ha.HaHelloReply).cluster_id
        await scout.close()
    fake = await FakeSlave.connect(broker.ha)
    succeeded(await fake.link(group, broker_id, key.current))
    succeeded(await fake.hello(group, broker_id, cluster_id=cluster_id))
    fake.acking = True
    await fake.caught_up()
    fake.ack(fake.position)
    return fake


async def test_a_member_that_goes_silent_holds_sends_and_readers_for_the_in_sync_bound_at_most(
    lone: BrokerProcess, keys: Any
) -> None:
    fake = await _member(lone, "lone", 5, keys[1])
    try:
        await eventually(lambda: _in_sync(lone, 1), timeout=5)
        assert (await send(lone, b"while it answers")).status is SendStatus.OK
        fake.acking = False  # hung: connected, silent
        silent = started = time.monotonic()
        held = await send(lone, b"held at most the bound")
        assert held.status is SendStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started < SYNC_TIMEOUT + 1.0
        await eventually(lambda: _in_sync(lone, 0), timeout=LAG_TIME + 2.0)
        assert time.monotonic() - silent < LAG_TIME + 1.5  # it left the set by the time bound
        started = time.monotonic()
        alone = await send(lone, b"not held at all")
        assert alone.status is SendStatus.SLAVE_NOT_AVAILABLE  # it left the in-sync set
        assert time.monotonic() - started < 0.8 * SYNC_TIMEOUT
        # readers are not held to its position either: both messages are readable
        await eventually(lambda: _readable(lone, {held.message_id, alone.message_id}), 3)
        fake.acking = True  # it speaks again: back in the set, and sends are OK again
        fake.ack(fake.position)
        await eventually(lambda: _in_sync(lone, 1), timeout=5)
        assert (await send(lone, b"answered again")).status is SendStatus.OK
    finally:
        await fake.close()


async def _in_sync(broker: BrokerProcess, count: int, **tls: Any) -> bool:
    return (await status(broker, **tls))["in_sync"] == count


async def _readable(broker: BrokerProcess, ids: set[str]) -> bool:
    async with Admin(servers=broker.address, client=client()) as admin:
        found = await admin.browse("T", address=broker.address, max_count=512)
    return ids <= {m.message_id for m in found}


async def test_a_member_acknowledges_nothing_it_was_not_sent_nor_offsets_past_a_queue(
    lone: BrokerProcess, keys: Any
) -> None:
    fake = await _member(lone, "lone", 6, keys[1], copy=True)
    try:
        fake.acking = False
        fake.ack(1 << 40)  # ahead of anything the master has sent it
        result = await send(lone, b"not yet on the member")
        assert result.status is not SendStatus.OK
        succeeded(await fake.offsets({"G2@T@0": 1_000_000}))
        assert await committed(lone, "G2") == 0  # beyond the queue's end: not taken
        succeeded(await fake.offsets({"G2@T@0": 2}))
        assert await committed(lone, "G2") == 2  # a real copy's offset is
    finally:
        await fake.close()


# -- real slaves ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, keys: Any) -> Iterator[list[BrokerProcess]]:
    """A master and a slave holding the same cluster key."""
    with (
        scratch_dir(tmp_path_factory, "pair") as root,
        secured(root / "m", "pair", keys[0]) as master,
        secured(root / "s", "pair", keys[0], "--broker-id", "1", "--master", master.ha) as slave,
    ):
        asyncio.run(_prepare(master))
        yield [master, slave]


async def test_a_slave_with_the_key_replicates(pair: list[BrokerProcess]) -> None:
    master, slave = pair
    await eventually(lambda: _in_sync(master, 1), timeout=10)
    assert (await send(master, b"replicated")).status is SendStatus.OK
    end = (await status(master))["log_end"]
    await eventually(lambda: _log_end_is(slave, end), timeout=10)
    assert (await status(slave))["link_error"] == ""
    assert [s["broker_id"] for s in (await status(master))["slaves"]] == [1]


async def _log_end_is(broker: BrokerProcess, end: int) -> bool:
    return (await status(broker))["log_end"] == end


async def test_a_slave_with_another_key_or_behind_a_relay_is_refused_and_says_why(
    pair: list[BrokerProcess], keys: Any, tmp_path: Path
) -> None:
    master, _ = pair
    relay = LinkProxy(master.ha)
    try:
        wrong = secured(tmp_path / "w", "pair", keys[2], "--broker-id", "2", "--master", master.ha)
        relayed = secured(
            tmp_path / "r", "pair", keys[0], "--broker-id", "3", "--master", relay.address
        )
        with wrong, relayed:
            await asyncio.sleep(1.1)  # users.json read
            await eventually(lambda: _link_error_has(wrong, "cluster key"), timeout=10)
            await eventually(lambda: _link_error_has(relayed, "relay"), timeout=10)
            assert (await status(wrong))["log_end"] == 0
            assert (await status(relayed))["log_end"] == 0
            assert [s["broker_id"] for s in (await status(master))["slaves"]] == [1]
            assert (await send(master, b"served throughout")).status is SendStatus.OK
            assert (await status(master))["links_refused"] >= 2
    finally:
        relay.close()


async def _link_error_has(broker: BrokerProcess, words: str) -> bool:
    return words in (await status(broker))["link_error"]


# -- TLS: mutual TLS on the replication port, and the key inside it ----------------------------


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory, keys: Any) -> Iterator[Any]:
    """A master and a slave over mutual TLS (``ha_mutual_tls``) and the cluster key."""
    with scratch_dir(tmp_path_factory, "tls-pair") as root:
        authority = trustme.CA()
        ca_file, cert_file, key_file = root / "ca.pem", root / "cert.pem", root / "key.pem"
        authority.cert_pem.write_to_path(str(ca_file))
        issued = authority.issue_cert("127.0.0.1", "localhost")
        issued.private_key_pem.write_to_path(str(key_file))
        for blob in issued.cert_chain_pems:
            blob.write_to_path(str(cert_file), append=True)
        tls = ("--tls-cert", str(cert_file), "--tls-key", str(key_file), "--tls-ca", str(ca_file))
        config = sync_config(ha_mutual_tls=True)
        with secured(root / "m", "tls", keys[0], *tls, config=config) as master:
            slave_args = (*tls, "--broker-id", "1", "--master", master.ha)
            with secured(root / "s", "tls", keys[0], *slave_args, config=config) as slave:
                context = ssl.create_default_context(cafile=str(ca_file))
                asyncio.run(_prepare_tls(master, context))
                yield master, slave, authority, context


async def _prepare_tls(master: BrokerProcess, context: ssl.SSLContext) -> None:
    await asyncio.sleep(1.1)
    async with Admin(servers=master.address, client=client(context)) as admin:
        await admin.create_topic("T", queues=1)


async def test_over_mutual_tls_a_slave_with_the_key_replicates_and_a_fake_reads_nothing(
    tls_pair: Any, keys: Any
) -> None:
    master, slave, authority, context = tls_pair
    await eventually(lambda: _in_sync(master, 1, tls=context), timeout=10)
    assert (await send(master, b"over mutual TLS", tls=context)).status is SendStatus.OK
    # a peer that trusts the CA but shows no certificate: the TLS handshake fails
    fake = await FakeSlave.connect(master.ha, tls=context)
    try:
        assert await fake.hello("tls", 1) is None
        assert fake.data_bytes == 0
    finally:
        await fake.close()
    # one with a certificate of the cluster's CA still needs the key
    holder = ssl.create_default_context(cafile=None)
    authority.configure_trust(holder)
    authority.issue_cert("stolen.example").configure_cert(holder)
    fake = await FakeSlave.connect(master.ha, tls=holder)
    try:
        assert "cluster key" in refusal(await fake.hello("tls", 1))
        assert fake.data_bytes == 0
    finally:
        await fake.close()
    assert (await status(slave, tls=context))["link_error"] == ""


# -- under a controller: etcd's member list --------------------------------------------------


async def test_under_a_controller_only_the_members_etcd_lists_count(
    tmp_path: Path, keys: Any
) -> None:
    from pocketmq.server.ha.etcd import Etcd, parse_controller

    with (
        EtcdProcess(tmp_path / "etcd") as etcd,
        secured(tmp_path / "m", "ctl", keys[0], "--controller", etcd.url) as master,
    ):
        await asyncio.sleep(1.1)
        async with Admin(servers=master.address, client=client()) as admin:
            await eventually(lambda: _leads(master), timeout=15)
            await admin.create_topic("T", queues=1)
        fake = await _member(master, "ctl", 7, keys[1])  # holds the key, not in etcd
        try:
            await asyncio.sleep(1.5)  # a few rounds of the member list
            result = await send(master, b"7 is nobody's member")
            assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
            store = Etcd(parse_controller(etcd.url))
            try:
                await store.put("/pocketmq/groups/ctl/members/7", {"address": "x"})
            finally:
                await store.close()
            await eventually(lambda: _in_sync(master, 1), timeout=10)
            assert (await send(master, b"7 is a member now")).status is SendStatus.OK
        finally:
            await fake.close()


async def _leads(broker: BrokerProcess) -> bool:
    return (await status(broker)).get("controller", {}).get("state") == "master"
