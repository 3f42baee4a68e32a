"""The gRPC port's TLS modes (docs/security.md, "TLS"): permissive serves TLS and plaintext
official clients on one port at the same time, with a self-signed certificate generated when none
is given; enforcing refuses plaintext; source addresses survive the permissive forwarder."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pocketmq.client import StoredMessage
from pocketmq.client.sync import SyncAdmin
from pocketmq.server.grpc.permissive import PermissiveForwarder
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import grpc_worker_args

pytestmark = pytest.mark.integration

_SEND = textwrap.dedent(
    """
    import sys
    from rocketmq import ClientConfiguration, Credentials, Message, Producer
    endpoint, topic, tls = sys.argv[1], sys.argv[2], sys.argv[3] == "tls"
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=5),
                        (topic,), tls_enable=tls)
    producer.startup()
    try:
        for number in range(3):
            message = Message()
            message.topic = topic
            message.body = f"{'tls' if tls else 'plain'}-{number}".encode()
            print(producer.send(message).message_id, flush=True)
    finally:
        producer.shutdown()
    """
)


def _official(endpoint: str, topic: str, tls: bool, roots: Path | None) -> subprocess.Popen[str]:
    """The official Python client in its own process (grpc reads its trusted roots from the
    environment once per process)."""
    env = {**os.environ}
    if roots is not None:
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(roots)
    return subprocess.Popen(
        [sys.executable, "-c", _SEND, endpoint, topic, "tls" if tls else "plain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_permissive_serves_tls_and_plaintext_clients_on_one_port_at_once(tmp_path: Path) -> None:
    mode = ("--grpc-tls", "permissive", *grpc_worker_args())
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, extra_args=mode) as broker:
        config_dir = broker.data_dir / "data" / "config" / "tls"
        certificate = config_dir / "self-signed.crt"
        assert certificate.exists()
        assert stat.S_IMODE(os.stat(config_dir / "self-signed.key").st_mode) == 0o600
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic("both-ways", queues=1)
        secure = _official(broker.grpc, "both-ways", True, certificate)
        plain = _official(broker.grpc, "both-ways", False, None)
        outputs = [process.communicate(timeout=90) for process in (secure, plain)]
        for process, (out, err) in zip((secure, plain), outputs, strict=True):
            assert process.returncode == 0, err[-3000:]
            assert len(out.split()) == 3
        bodies = [m.body for m in _browse(broker.address, "both-ways")]
        assert sorted(bodies) == sorted(
            f"{kind}-{n}".encode() for kind in ("tls", "plain") for n in range(3)
        )


def _browse(address: str, topic: str) -> list[StoredMessage]:
    with SyncAdmin(servers=address) as admin:
        return admin.run(lambda a: a.browse(topic, address=address, max_count=10))


def test_enforcing_refuses_a_plaintext_client_and_keeps_the_generated_certificate(
    tmp_path: Path,
) -> None:
    mode = ("--grpc-tls", "enforcing", *grpc_worker_args())
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, extra_args=mode) as broker:
        certificate = broker.data_dir / "data" / "config" / "tls" / "self-signed.crt"
        first = certificate.read_bytes()
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic("tls-only", queues=1)
        plain = _official(broker.grpc, "tls-only", False, None)
        _, err = plain.communicate(timeout=90)
        assert plain.returncode != 0
        secure = _official(broker.grpc, "tls-only", True, certificate)
        out, err = secure.communicate(timeout=90)
        assert secure.returncode == 0, err[-3000:]
        assert len(out.split()) == 3
        broker.restart()
        assert certificate.read_bytes() == first  # generated once, reused


def test_the_forwarder_reports_the_client_behind_each_connection() -> None:
    forwarder = PermissiveForwarder(("127.0.0.1", 1), ("127.0.0.1", 2))
    forwarder.peers[40000] = "10.1.2.3:5555"
    assert forwarder.real_peer("ipv4:127.0.0.1:40000") == "10.1.2.3:5555"
    assert forwarder.real_peer("ipv4:127.0.0.1:40001") == "ipv4:127.0.0.1:40001"
    assert forwarder.real_peer("unix:/tmp/x") == "unix:/tmp/x"


def test_a_damaged_self_signed_pair_is_made_again(tmp_path: Path) -> None:
    from pocketmq.server.auth.certificates import self_signed

    cert, key = self_signed(tmp_path, ["127.0.0.1"])
    first = Path(cert).read_bytes()
    assert self_signed(tmp_path, ["127.0.0.1"]) == (cert, key)
    assert Path(cert).read_bytes() == first  # a good pair is kept
    Path(cert).write_text("garbage")
    self_signed(tmp_path, ["127.0.0.1"])
    assert Path(cert).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    other, _ = self_signed(tmp_path / "other", [])
    Path(key).write_bytes((Path(other).parent / "self-signed.key").read_bytes())  # wrong key
    renewed = self_signed(tmp_path, ["127.0.0.1"])
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    certificate = x509.load_pem_x509_certificate(Path(renewed[0]).read_bytes())
    private = serialization.load_pem_private_key(Path(renewed[1]).read_bytes(), password=None)
    assert certificate.public_key().public_numbers() == private.public_key().public_numbers()  # type: ignore[union-attr]
