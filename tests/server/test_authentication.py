"""Authentication of the official clients (docs/security.md): the header each client sends, users
with encrypted secrets, and a broker that refuses unsigned or wrongly signed gRPC calls."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import Admin, ClientConfig
from pocketmq.client.sync import SyncAdmin
from pocketmq.errors import Code, NoPermissionError
from pocketmq.protocol import PROTOCOL_VERSION, FrameDecoder, FrameKind, RequestCode, encode_body
from pocketmq.protocol import structs as w
from pocketmq.protocol.frames import encode_frame
from pocketmq.server.auth.signature import parse_authorization, signature_matches
from pocketmq.server.auth.users import GATEWAY_USER, UserStore
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import grpc_worker_args, scratch_broker

STAMP = "20261124T101500Z"
SECRET = "s3cret-key"


def _sign(secret: str, stamp: str) -> str:
    return hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()


@pytest.mark.parametrize(
    ("header", "access_key"),
    [
        # Python: lower-case hex
        (f"MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, "
         f"Signature={_sign(SECRET, STAMP)}", "alice"),
        # Java: upper-case hex
        (f"MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, "
         f"Signature={_sign(SECRET, STAMP).upper()}", "alice"),
        # Go: the access key is what comes before the first '/'
        (f"MQv2-HMAC-SHA1 Credential=alice//Rocketmq, SignedHeaders=x-mq-date-time, "
         f"Signature={_sign(SECRET, STAMP)}", "alice"),
    ],
)  # fmt: skip
def test_each_official_clients_header_is_understood(header: str, access_key: str) -> None:
    parsed = parse_authorization(header)
    assert parsed is not None
    assert parsed.access_key == access_key
    assert signature_matches(SECRET, STAMP, parsed.signature)
    assert not signature_matches("other", STAMP, parsed.signature)
    assert not signature_matches(SECRET, "20261124T101501Z", parsed.signature)


@pytest.mark.parametrize(
    "header",
    ["", "Basic abc", "MQv2-HMAC-SHA1 Credential=, Signature=ab", "MQv2-HMAC-SHA1 Credential=a"],
)
def test_a_malformed_header_is_none(header: str) -> None:
    assert parse_authorization(header) is None


def test_secrets_are_encrypted_at_rest_and_edits_are_seen(tmp_path: Path) -> None:
    store = UserStore(tmp_path)
    generated = store.create("alice")
    store.create("bob", "bobs-secret", "super")
    raw = (tmp_path / "users.json").read_text()
    assert generated not in raw
    assert "bobs-secret" not in raw
    for name in ("users.json", "users.key"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    reader = UserStore(tmp_path)  # another process's view (the broker)
    reader.load()
    assert reader.secret("alice") == generated
    assert [(u.access_key, u.user_type) for u in reader.users()] == [
        ("alice", "normal"),
        ("bob", "super"),
    ]
    store.update("bob", secret="new-secret")
    store.delete("alice")
    time.sleep(0.01)
    reader.load()
    assert reader.secret("alice") is None
    assert reader.secret("bob") == "new-secret"
    (tmp_path / "users.key").write_bytes(b"not-the-key-" + b"0" * 32)
    assert UserStore(tmp_path).secret("bob") is None


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    extra = ("--authentication", *grpc_worker_args())
    options: dict[str, Any] = {"config": FAST_BROKER, "extra_args": extra}
    with scratch_broker(tmp_path_factory, "auth-broker", **options) as process:
        yield process


def _user(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pocketmq", "user", *args]
    command += ["--data-dir", str(broker.data_dir / "data")]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def _send(
    broker: BrokerProcess, access_key: str, secret: str, endpoint: str = "", topic: str = "guarded"
) -> str:
    """Send one message with the official client (to the broker's gRPC port, or ``endpoint``);
    "" when it worked, else the error."""
    from rocketmq import ClientConfiguration, Credentials, Producer

    from ..grpc.conftest import message

    configuration = ClientConfiguration(endpoint or broker.grpc, Credentials(access_key, secret))
    producer = Producer(configuration, (topic,))
    try:
        producer.startup()
        producer.send(message(topic, b"signed"))
    except Exception as exc:  # the official client's own error types
        return str(exc) or type(exc).__name__
    finally:
        with contextlib.suppress(Exception):  # one that never started cannot shut down cleanly
            producer.shutdown()
    return ""


@pytest.mark.integration
def test_only_signed_grpc_calls_of_known_users_get_through(broker: BrokerProcess) -> None:
    created = _user(broker, "create", "alice", "--secret", SECRET)
    assert created.returncode == 0, created.stderr
    time.sleep(1.1)  # the broker reads the users file at most once a second
    with SyncAdmin(servers=broker.address, client=_as("alice", SECRET)) as admin:
        admin.create_topic("guarded", queues=1)
    listed = [json.loads(line) for line in _user(broker, "list", "--json").stdout.splitlines()]
    assert [row["access_key"] for row in listed] == ["alice"]
    assert SECRET not in json.dumps(listed)
    assert _send(broker, "alice", SECRET) == ""
    assert _send(broker, "alice", "wrong-secret") != ""
    assert _send(broker, "", "") != ""
    assert _send(broker, "mallory", SECRET) != ""
    assert _user(broker, "delete", "alice").returncode == 0
    time.sleep(1.1)
    assert _send(broker, "alice", SECRET) != ""
    assert "refused a gRPC call" in broker.log()


def _as(access_key: str, secret: str) -> ClientConfig:
    return ClientConfig(access_key=access_key, secret_key=secret)


@pytest.mark.integration
async def test_the_native_port_answers_only_after_a_challenge_is_met(
    broker: BrokerProcess,
) -> None:
    """The SDK answers the HELLO's challenge; no credentials, a wrong secret or an unknown key
    get NO_PERMISSION, and a raw request sent before authenticating is refused."""
    assert _user(broker, "create", "carol", "--secret", "carols-secret").returncode == 0
    await asyncio.sleep(1.1)
    async with Admin(servers=broker.address, client=_as("carol", "carols-secret")) as admin:
        await admin.create_topic("native-guarded", queues=1)
        assert "native-guarded" in [t.name for t in await admin.list_topics()]
    for config in (_as("", ""), _as("carol", "wrong"), _as("nobody", "carols-secret")):
        with pytest.raises(NoPermissionError):
            async with Admin(servers=broker.address, client=config) as admin:
                await admin.list_topics()
    assert await _raw_list_topics(broker.address) == Code.NO_PERMISSION
    env = {**os.environ, "POCKETMQ_SERVER": broker.address}
    env |= {"POCKETMQ_ACCESS_KEY": "carol", "POCKETMQ_SECRET_KEY": "carols-secret"}
    command = [sys.executable, "-m", "pocketmq", "topic", "list", "--json"]
    listed = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert listed.returncode == 0, listed.stderr


@pytest.mark.integration
async def test_the_gateway_identity_is_closed_to_guesses(broker: BrokerProcess) -> None:
    """``gateway/proxy`` is what a broker's own proxy workers sign in as, with a secret made at
    each start (docs/proxy.md): without workers nobody can use it, not even with an empty
    secret, and with them a guessed secret is refused like any other."""
    for secret in ("", "guess", "0" * 64):
        with pytest.raises(NoPermissionError):
            async with Admin(servers=broker.address, client=_as(GATEWAY_USER, secret)) as admin:
                await admin.list_topics()


async def _raw_list_topics(address: str) -> int:
    """HELLO, then LIST_TOPICS without AUTHENTICATE: the response code."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    decoder = FrameDecoder()
    hello = w.HelloRequest(PROTOCOL_VERSION, "raw-client", "test")
    writer.write(encode_frame(FrameKind.REQUEST, RequestCode.HELLO, 1, encode_body(hello)))
    writer.write(
        encode_frame(FrameKind.REQUEST, RequestCode.LIST_TOPICS, 2, encode_body(w.Empty()))
    )
    frames: list[Any] = []
    while len(frames) < 2:
        frames += decoder.feed(await reader.read(65536))
    writer.close()
    return int(frames[1].code)


@pytest.mark.integration
def test_a_standalone_proxy_checks_signatures_and_signs_in_to_its_broker(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """``pocketmq proxy --authentication`` in front of an authenticating broker (docs/proxy.md,
    "Security"): it reads the broker's users to check each official client's signature, and
    signs in to the broker's native port as the super user of POCKETMQ_ACCESS_KEY."""
    for args in (("proxy-root", "root-secret", "super"), ("erin", SECRET, "normal")):
        created = _user(broker, "create", args[0], "--secret", args[1], "--type", args[2])
        assert created.returncode == 0, created.stderr
    time.sleep(1.1)
    with SyncAdmin(servers=broker.address, client=_as("proxy-root", "root-secret")) as admin:
        admin.create_topic("through-proxy", queues=1)
    env = {**os.environ, "POCKETMQ_ACCESS_KEY": "proxy-root", "POCKETMQ_SECRET_KEY": "root-secret"}
    command = [sys.executable, "-m", "pocketmq", "proxy", "--broker", broker.address]
    command += ["--grpc-port", "0", "--authentication", "--data-dir", str(broker.data_dir / "data")]
    with (tmp_path / "proxy.log").open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("pocketmq proxy ready"), (tmp_path / "proxy.log").read_text()
            endpoint = line.split("grpc=", 1)[1].split()[0]
            assert _send(broker, "erin", SECRET, endpoint, "through-proxy") == ""
            assert _send(broker, "erin", "not-her-secret", endpoint, "through-proxy") != ""
            assert _send(broker, "", "", endpoint, "through-proxy") != ""
        finally:
            process.terminate()
            assert process.wait(15) == 0
            process.stdout.close()  # type: ignore[union-attr]
