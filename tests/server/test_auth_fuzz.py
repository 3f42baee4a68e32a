"""Hostile credentials (docs/security.md): 10,000 malformed authorization headers and 10,000
wrong native AUTHENTICATE frames are each refused with a clear error and counted, never crash
anything, and the broker keeps serving its real users."""

from __future__ import annotations

import asyncio
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
from pocketmq.errors import Code
from pocketmq.protocol import PROTOCOL_VERSION, FrameDecoder, FrameKind, RequestCode, encode_body
from pocketmq.protocol import structs as w
from pocketmq.protocol.frames import encode_frame
from pocketmq.server.auth.users import UserStore
from pocketmq.server.grpc.auth import AuthInterceptor
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER

HEADERS = 10_000
FRAMES = 10_000
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


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, http_port=0,
                       extra_args=("--authentication",)) as process:  # fmt: skip
        command = [sys.executable, "-m", "pocketmq", "user", "create", "alice", "--secret",
                   "alices-secret", "--data-dir", str(process.data_dir / "data")]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        time.sleep(1.1)
        yield process


async def _hammer(address: str, rng: random.Random, frames: int) -> list[int]:
    """One connection: HELLO, then ``frames`` wrong AUTHENTICATE requests; their answer codes."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    hello = w.HelloRequest(PROTOCOL_VERSION, "fuzz", "test")
    writer.write(encode_frame(FrameKind.REQUEST, RequestCode.HELLO, 1, encode_body(hello)))
    for number in range(frames):
        key = rng.choice(["alice", "", "mallory", "a" * rng.randrange(200), "ünï"])
        signature = "".join(rng.choices(string.hexdigits + "zZ!é", k=rng.randrange(80)))
        body = encode_body(w.AuthenticateRequest(key, signature))
        writer.write(encode_frame(FrameKind.REQUEST, RequestCode.AUTHENTICATE, number + 2, body))
    await writer.drain()
    decoder = FrameDecoder()
    answers: list[Any] = []
    while len(answers) < frames + 1:
        chunk = await asyncio.wait_for(reader.read(65536), 30)
        assert chunk, "the broker closed the connection"
        answers += decoder.feed(chunk)
    writer.close()
    return [int(a.code) for a in answers[1:]]


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
    per_connection = FRAMES // 10
    codes = await asyncio.gather(
        *(_hammer(broker.address, random.Random(rng.random()), per_connection) for _ in range(10))
    )
    assert {code for batch in codes for code in batch} == {Code.NO_PERMISSION}
    assert sum(len(batch) for batch in codes) == FRAMES
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
    assert failures[("native", "unauthenticated")] == FRAMES
    assert failures[("grpc", "unauthenticated")] == 200
    alice = ClientConfig(access_key="alice", secret_key="alices-secret")
    async with Admin(servers=broker.address, client=alice) as admin:  # still serving
        await admin.create_topic("after-the-flood", queues=1)
    assert "alices-secret" not in broker.log()
