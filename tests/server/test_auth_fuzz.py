"""Hostile credentials (docs/security.md): 10,000 malformed authorization headers and 10,000
wrong native AUTHENTICATE attempts are each refused with a clear error and counted, never crash
anything, and the broker keeps serving its real users. On a real broker each wrong login costs
its connection (one guess per connection) and its source address a token of its bucket."""

from __future__ import annotations

import asyncio
import contextlib
import random
import string
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pocketmq.client import Admin, ClientConfig
from pocketmq.errors import Code, NoPermissionError
from pocketmq.protocol import PROTOCOL_VERSION, FrameDecoder, FrameKind, RequestCode, encode_body
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import client_proof, new_nonce
from pocketmq.protocol.frames import encode_frame
from pocketmq.server.auth.handshake import Attempt, Authenticator
from pocketmq.server.auth.throttle import FailureThrottle
from pocketmq.server.auth.users import UserStore
from pocketmq.server.grpc.auth import AuthInterceptor
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER

HEADERS = 10_000
ATTEMPTS = 10_000  # in process, against the check itself
CONNECTIONS = 200  # against a real broker: one wrong login each
VALID = "MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, Signature=" + "ab" * 20


def _mangled(rng: random.Random) -> str:
    """A header that is not a valid signature of alice: cut, spliced, garbled or random."""
    kind = rng.randrange(6)
    if kind == 0:
        return VALID[: rng.randrange(len(VALID))]
    if kind == 1:
        position = rng.randrange(len(VALID))
        return VALID[:position] + rng.choice(",= /\x00é\t") + VALID[position:]
    if kind == 2:
        return VALID.replace("alice", "".join(rng.choices(string.printable, k=rng.randrange(40))))
    if kind == 3:
        return "".join(rng.choices(string.printable + "ü€\u2028", k=rng.randrange(300)))
    if kind == 4:
        return VALID.replace("ab" * 20, "".join(rng.choices("0123456789abcdefXYZ", k=40)))
    return "MQv2-HMAC-SHA1 " + ", ".join(
        f"{rng.choice(['Credential', 'Signature', 'SignedHeaders', ''])}="
        f"{''.join(rng.choices(string.ascii_letters, k=rng.randrange(12)))}"
        for _ in range(rng.randrange(5))
    )


def test_ten_thousand_malformed_headers_are_each_refused_with_a_reason(tmp_path: Path) -> None:
    users = UserStore(tmp_path)
    users.create("alice", "alices-secret")
    interceptor = AuthInterceptor(users)
    rng = random.Random(20261124)
    for _ in range(HEADERS):
        header = _mangled(rng)
        why = interceptor.problem({"authorization": header, "x-mq-date-time": "20261124T1Z"})
        assert why, header
        assert "alices-secret" not in why


def _mangled_attempt(rng: random.Random) -> Attempt:
    """An AUTHENTICATE that does not prove alice's secret: random keys, proofs of any text, a
    right proof for the wrong address, old clients without a nonce."""
    key = rng.choice(["alice", "", "mallory", "a" * rng.randrange(200), "ünï", "cluster/inner"])
    proof = "".join(rng.choices(string.hexdigits + "zZ!é\x00", k=rng.randrange(80)))
    address = rng.choice(["127.0.0.1:1", "127.0.0.1:10911", "", "[::1]:1", "é:x"])
    if rng.random() < 0.2:  # right secret, other address: what a relay forwards
        proof = client_proof("alices-secret", "c" * 32, "n" * 32, "fuzz", "b", "10.9.9.9:1")
        address = "10.9.9.9:1"
    nonce = rng.choice(["n" * 32, "", "x"])
    return Attempt(key, proof, address, "c" * 32, nonce, "fuzz", "b", "127.0.0.1:10911", "::1")


def test_wrong_native_logins_are_each_refused_with_a_reason(tmp_path: Path) -> None:
    users = UserStore(tmp_path)
    users.create("alice", "alices-secret")
    clock = [0.0]
    throttle = FailureThrottle(10, 1.0, clock=lambda: clock[0])
    authenticator = Authenticator(users, throttle=throttle)
    rng = random.Random(20261126)
    for _ in range(ATTEMPTS):
        clock[0] += 1.0  # a token refilled each time: every attempt is checked
        with pytest.raises(NoPermissionError) as refusal:
            authenticator.verify(_mangled_attempt(rng))
        assert "alices-secret" not in str(refusal.value)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # a bucket that refills fast: the flood is throttled, yet the test need not wait for it
    config = {**FAST_BROKER, "server": {"auth_failure_burst": 20, "auth_failure_rate": 50.0}}
    with BrokerProcess(tmp_path / "b", config=config, http_port=0,
                       extra_args=("--authentication",)) as process:  # fmt: skip
        command = [sys.executable, "-m", "pocketmq", "user", "create", "alice", "--secret",
                   "alices-secret", "--data-dir", str(process.data_dir / "data")]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        time.sleep(1.1)
        yield process


async def _guess(address: str, rng: random.Random) -> list[int]:
    """One connection: HELLO and a wrong AUTHENTICATE; the codes answered before the broker
    closed it (it closes after the answer: one guess per connection)."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        hello = w.HelloRequest(PROTOCOL_VERSION, "fuzz", "test", client_nonce=new_nonce())
        writer.write(encode_frame(FrameKind.REQUEST, RequestCode.HELLO, 1, encode_body(hello)))
        key = rng.choice(["alice", "", "mallory", "a" * rng.randrange(200), "ünï"])
        signature = "".join(rng.choices(string.hexdigits + "zZ!é", k=rng.randrange(80)))
        body = encode_body(w.AuthenticateRequest(key, signature, f"{host}:{port}"))
        writer.write(encode_frame(FrameKind.REQUEST, RequestCode.AUTHENTICATE, 2, body))
        await writer.drain()
        decoder = FrameDecoder()
        answers: list[Any] = []
        while chunk := await asyncio.wait_for(reader.read(65536), 30):  # until closed
            answers += decoder.feed(chunk)
        return [int(a.code) for a in answers[1:]]
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def _failures(broker: BrokerProcess) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://{broker.http}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "pocketmq_auth_failures":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[(sample.labels["protocol"], sample.labels["reason"])] = sample.value
    return out


@pytest.mark.integration
async def test_a_flood_of_wrong_credentials_is_refused_counted_and_the_broker_serves_on(
    broker: BrokerProcess,
) -> None:
    rng = random.Random(7)
    codes: list[list[int]] = []
    for _ in range(CONNECTIONS // 20):
        codes += await asyncio.gather(
            *(_guess(broker.address, random.Random(rng.random())) for _ in range(20))
        )
    # one answer per connection, then the broker closes it
    assert [len(batch) for batch in codes] == [1] * CONNECTIONS
    answered = [batch[0] for batch in codes]
    assert set(answered) <= {Code.NO_PERMISSION, Code.TOO_MANY_REQUESTS}
    assert Code.TOO_MANY_REQUESTS in answered, "a flood from one address is throttled"
    channel = grpc.aio.insecure_channel(broker.grpc)
    from rocketmq.grpc_protocol import service_pb2 as s

    query = channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/QueryRoute",
        request_serializer=s.QueryRouteRequest.SerializeToString,
        response_deserializer=s.QueryRouteResponse.FromString,
    )
    header_rng = random.Random(11)
    for _ in range(200):
        # gRPC metadata values are printable ASCII: the rest cannot even be sent
        header = "".join(c for c in _mangled(header_rng) if 32 <= ord(c) < 127)
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await query(s.QueryRouteRequest(), metadata=(("authorization", header),), timeout=10)
        assert refusal.value.code() is grpc.StatusCode.UNAUTHENTICATED
    await channel.close()
    failures = await asyncio.to_thread(_failures, broker)
    assert failures[("native", "unauthenticated")] == answered.count(Code.NO_PERMISSION)
    assert failures[("native", "throttled")] == answered.count(Code.TOO_MANY_REQUESTS)
    assert failures[("grpc", "unauthenticated")] == 200
    alice = ClientConfig(access_key="alice", secret_key="alices-secret")
    async with Admin(servers=broker.address, client=alice) as admin:  # still serving
        await admin.create_topic("after-the-flood", queues=1)
    assert "alices-secret" not in broker.log()
