"""TLS on the broker's native, gRPC and HTTP ports (``--tls-cert``/``--tls-key``,
docs/security.md): the SDK, the CLI, a scrape and the official Python client connect over TLS
with a certificate from a test CA; a plain-TCP client gets a clear error, not a hang."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from pocketmq import Message
from pocketmq.client import Admin, ClientConfig, Producer, SimpleConsumer
from pocketmq.errors import BrokerConnectionError
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import grpc_worker_args, scratch_broker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path, Path, Path]:
    """A test CA and a server certificate for 127.0.0.1, written as PEM files."""
    root = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = root / "ca.pem", root / "cert.pem", root / "key.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    server.private_key_pem.write_to_path(str(key_file))
    for blob in server.cert_chain_pems:
        blob.write_to_path(str(cert_file), append=True)
    return authority, ca_file, cert_file, key_file


@pytest.fixture(scope="module")
def broker(ca: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    _, _, cert, key = ca
    tls = ("--tls-cert", str(cert), "--tls-key", str(key), *grpc_worker_args())
    options = {"config": FAST_BROKER, "http_port": 0, "extra_args": tls}
    with scratch_broker(tmp_path_factory, "tls-broker", **options) as process:
        yield process


def _client(ca_file: Path) -> ClientConfig:
    return ClientConfig(tls=ssl.create_default_context(cafile=str(ca_file)))


async def test_the_sdk_sends_and_receives_over_tls(broker: BrokerProcess, ca: Any) -> None:
    config = _client(ca[1])
    async with Admin(servers=broker.address, client=config) as admin:
        await admin.create_topic("secure", queues=1)
        await admin.create_group("secure-readers")
    async with Producer(servers=broker.address, client=config) as producer:
        await producer.send(Message(topic="secure", body=b"over tls"))
    async with SimpleConsumer(
        "secure-readers", "secure", servers=broker.address, client=config, await_duration=2
    ) as consumer:
        received = await consumer.receive(max_messages=1)
        assert [m.body for m in received] == [b"over tls"]
        await consumer.ack(received[0])


async def test_a_plain_tcp_client_is_refused_with_a_clear_error(broker: BrokerProcess) -> None:
    plain = ClientConfig(tls=None, connect_timeout=3.0, request_timeout=3.0)
    with pytest.raises(BrokerConnectionError):
        async with Admin(servers=broker.address, client=plain) as admin:
            await admin.list_topics()


async def test_a_client_that_does_not_trust_the_ca_is_refused(broker: BrokerProcess) -> None:
    other = trustme.CA()
    context = ssl.create_default_context()
    other.configure_trust(context)
    with pytest.raises(BrokerConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        async with Admin(servers=broker.address, client=ClientConfig(tls=context)) as admin:
            await admin.list_topics()


def test_the_cli_and_a_scrape_use_tls(broker: BrokerProcess, ca: Any) -> None:
    env = {**os.environ, "POCKETMQ_SERVER": broker.address, "POCKETMQ_TLS_CA": str(ca[1])}
    listed = subprocess.run(
        [sys.executable, "-m", "pocketmq", "topic", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert all("name" in json.loads(line) for line in listed.stdout.splitlines())
    context = ssl.create_default_context(cafile=str(ca[1]))
    with urllib.request.urlopen(f"https://{broker.http}/healthz", context=context) as reply:
        assert reply.read() == b"ok\n"


def test_the_official_python_client_sends_over_tls(broker: BrokerProcess, ca: Any) -> None:
    from rocketmq import ClientConfiguration, Credentials
    from rocketmq import Producer as OfficialProducer

    from ..grpc.conftest import message

    # grpc reads the roots to trust from here when a secure channel is first made
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(ca[1])
    asyncio.run(_topic(broker.address, _client(ca[1])))
    configuration = ClientConfiguration(broker.grpc, Credentials())
    producer = OfficialProducer(configuration, ("official-secure",), tls_enable=True)
    producer.startup()
    try:
        receipt = producer.send(message("official-secure", b"from the official client"))
        assert receipt.message_id
    finally:
        producer.shutdown()


async def _topic(address: str, config: ClientConfig) -> None:
    async with Admin(servers=address, client=config) as admin:
        await admin.create_topic("official-secure", queues=1)


async def test_the_embedded_name_server_speaks_tls_too(broker: BrokerProcess, ca: Any) -> None:
    """One TLS setting for the whole client: routes from the embedded name server, sends to the
    broker it names."""
    config = _client(ca[1])
    async with Admin(servers=broker.address, client=config) as admin:
        await admin.create_topic("routed", queues=1)
    async with Producer(servers=broker.namesrv, client=config) as producer:
        result = await producer.send(Message(topic="routed", body=b"via the name server"))
    assert result.message_id


async def test_replication_runs_over_tls_and_a_slave_must_trust_its_master(
    ca: Any, tmp_path: Path
) -> None:
    """With --tls-cert the replication port speaks TLS: a slave given the CA (--tls-ca) copies
    the master's log; one that cannot verify the master's certificate gets no byte of it."""
    from ..integration.conftest import eventually

    _, ca_file, cert, key = ca
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    group = {"config": FAST_BROKER, "grpc_port": None, "broker_name": "secured"}
    config = _client(ca_file)
    with (
        BrokerProcess(tmp_path / "m", extra_args=tls, **group) as master,
        BrokerProcess(
            tmp_path / "s",
            extra_args=(*tls, "--broker-id", "1", "--master", master.ha, "--tls-ca", str(ca_file)),
            **group,
        ) as slave,  # fmt: skip
        BrokerProcess(
            tmp_path / "u", extra_args=(*tls, "--broker-id", "2", "--master", master.ha), **group
        ) as untrusting,  # fmt: skip
    ):
        async with Admin(servers=master.address, client=config) as admin:
            await admin.create_topic("replicated", queues=1)
        async with Producer(servers=master.address, client=config) as producer:
            sent = await producer.send(Message(topic="replicated", body=b"over TLS"))

        async def copied(address: str) -> bool:
            async with Admin(servers=address, client=config) as admin:
                try:
                    found = await admin.browse("replicated", address=address)
                except Exception:  # the topic has not reached the slave yet
                    return False
            return [m.message_id for m in found] == [sent.message_id]

        await eventually(lambda: copied(slave.address), timeout=20)
        async with Admin(servers=untrusting.address, client=config) as admin:
            [status] = [s for s in await admin.broker_status() if s.address == untrusting.address]
        assert "CERTIFICATE_VERIFY_FAILED" in str(status.replication.get("link_error", ""))
        assert not await copied(untrusting.address)


async def test_the_sdk_authenticates_over_tls(ca: Any, tmp_path: Path) -> None:
    """TLS and authentication together: the challenge is answered inside the TLS session; a
    wrong secret is still refused."""
    import subprocess
    import sys

    from pocketmq.errors import NoPermissionError

    _, ca_file, cert, key = ca
    extra = ("--tls-cert", str(cert), "--tls-key", str(key), "--authentication")
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, grpc_port=None,
                       extra_args=extra) as broker:  # fmt: skip
        command = [sys.executable, "-m", "pocketmq", "user", "create", "tina", "--secret", "t-s",
                   "--data-dir", str(broker.data_dir / "data")]  # fmt: skip
        await asyncio.to_thread(subprocess.run, command, check=True, capture_output=True)
        await asyncio.sleep(1.1)
        tls = ssl.create_default_context(cafile=str(ca_file))
        good = ClientConfig(tls=tls, access_key="tina", secret_key="t-s")
        async with Admin(servers=broker.address, client=good) as admin:
            await admin.create_topic("sealed", queues=1)
        async with Producer(servers=broker.address, client=good) as producer:
            assert (await producer.send(Message(topic="sealed", body=b"x"))).message_id
        bad = ClientConfig(tls=tls, access_key="tina", secret_key="wrong")
        with pytest.raises(NoPermissionError):
            async with Admin(servers=broker.address, client=bad) as admin:
                await admin.list_topics()


async def test_a_stand_alone_name_server_over_tls(ca: Any, tmp_path: Path) -> None:
    """``pocketmq namesrv --tls-cert``: the broker registers over TLS (--namesrv-tls, verifying
    with --tls-ca) and a client finds the route there with its TLS setting; a plain client
    cannot."""
    from pocketmq.testing import NameServerProcess

    _, ca_file, cert, key = ca
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    with NameServerProcess(tmp_path / "ns", extra_args=tls) as namesrv:
        extra = (*tls, "--namesrv-tls", "--tls-ca", str(ca_file))
        with BrokerProcess(tmp_path / "b", config=FAST_BROKER, grpc_port=None,
                           namesrv=namesrv.address, extra_args=extra) as broker:  # fmt: skip
            config = _client(ca_file)
            async with Admin(servers=broker.address, client=config) as admin:
                await admin.create_topic("named", queues=1)
            async with Producer(servers=namesrv.address, client=config) as producer:
                sent = await producer.send(Message(topic="named", body=b"routed over TLS"))
            assert sent.message_id
            with pytest.raises(BrokerConnectionError):
                async with Producer(servers=namesrv.address) as plain:
                    await plain.send(Message(topic="named", body=b"plain"))
