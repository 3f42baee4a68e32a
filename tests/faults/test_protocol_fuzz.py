"""Issue 14: a protocol fuzz test of every port of a real broker, in the normal test run.

Seeded (``POCKETMQ_FUZZ_SEED`` replays or varies a run) and bounded in time: about 15 s of
hostile traffic — typed requests with extreme values, mutated requests, noise — on the native
port (after a HELLO, and before one), on the gRPC port, and, mixed into the native phase, RocketMQ
remoting frames on the ports that sniff them (the broker's and its embedded name server's,
issue 31) and first bytes that are neither protocol, while a well-behaved client keeps sending
and receiving and a well-behaved remoting client keeps fetching a route. Asserted throughout:
the well-behaved clients are served within a few seconds, no request is answered with an
internal error (``SYSTEM_ERROR``; remoting ``SYSTEM_ERROR`` with "internal error"; gRPC
``UNKNOWN`` or ``INTERNAL``; v2 ``INTERNAL_ERROR``/``INTERNAL_SERVER_ERROR``), the broker's RSS
stays bounded, and its log holds no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import struct
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from pocketmq import Message
from pocketmq.client import Admin, Producer, SimpleConsumer
from pocketmq.errors import Code
from pocketmq.protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    RequestCode,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.remoting import RemotingCommand, RemotingFrameDecoder, encode_command
from pocketmq.protocol.remoting import RequestCode as RemotingCode
from pocketmq.protocol.remoting import ResponseCode as RemotingResponse
from pocketmq.protocol.structs import REQUESTS
from pocketmq.server.grpc.pb import Code as V2Code
from pocketmq.server.grpc.pb import d
from pocketmq.server.grpc.pb import s as v2
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker
from .fuzz import FuzzNames, mutate, native_body, protobuf_request, remoting_request

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("POCKETMQ_FUZZ_SEED", "20240614"))
# seconds of fuzzing per port; raise it to search longer (the test run keeps it short)
PORT_SECONDS = float(os.environ.get("POCKETMQ_FUZZ_SECONDS", "7"))
RSS_BOUND_MIB = 160  # over the broker's RSS before the fuzzing
PROBE_LATENCY = 5.0  # seconds a well-behaved request may take on a loaded 2-core machine
SERVICE = "/apache.rocketmq.v2.MessagingService/"
V2_INTERNAL = {V2Code.INTERNAL_ERROR, V2Code.INTERNAL_SERVER_ERROR}
GRPC_INTERNAL = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
# what a client may ask for and the broker does not run long on (no sends to named queues)
_CODES = sorted(REQUESTS)


def _rss_mib(broker: BrokerProcess) -> int:
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {
        "broker": {"max_queue_wait": 5.0, "delay_levels": [1, 1, 1]},
        "store": {"max_message_size": 64 * 1024, "flush_interval": 0.05},
    }
    with scratch_broker(tmp_path_factory, "fuzz", config=config) as process:
        yield process


class Findings:
    """What the fuzzers saw that they must not: internal errors, with the input that caused
    them (kept short), and how each request kind was answered."""

    def __init__(self) -> None:
        self.internal: list[str] = []
        self.answers: dict[str, int] = {}

    def saw(self, what: str) -> None:
        self.answers[what] = self.answers.get(what, 0) + 1

    def internal_error(self, what: str, detail: str, sent: bytes) -> None:
        if len(self.internal) < 20:
            self.internal.append(f"{what}: {detail[:300]} <- {sent[:120]!r}")


# -- native port ------------------------------------------------------------------------------


def _native_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return str(code)  # e.g. a one-way push the broker sent (CONSUMERS_CHANGED)


def _native_frame(rng: random.Random, names: FuzzNames, request_id: int) -> bytes:
    roll = rng.random()
    code = rng.choice(_CODES)
    if roll < 0.6:
        body = native_body(code, rng, names)
    elif roll < 0.85:
        body = mutate(native_body(code, rng, names), rng)
    else:
        code = rng.choice([code, rng.randint(0, 65535)])
        body = rng.randbytes(rng.randint(0, 200))
    kind = FrameKind.ONEWAY if rng.random() < 0.05 else FrameKind.REQUEST
    if code == RequestCode.HELLO:
        code = RequestCode.LIST_TOPICS  # a second HELLO is legal; keep the frames interesting
    return encode_frame(kind, code, request_id, body)


async def _native_session(
    address: str, rng: random.Random, names: FuzzNames, findings: Findings
) -> None:
    sent: dict[int, bytes] = {}
    stream = bytearray()
    if rng.random() < 0.9:  # greet
        hello = encode_body(w.HelloRequest(PROTOCOL_VERSION, "fuzz"))
        stream += encode_frame(FrameKind.REQUEST, RequestCode.HELLO, 1, hello)
    for request_id in range(2, 2 + rng.randint(5, 60)):
        frame = _native_frame(rng, names, request_id)
        sent[request_id] = frame
        stream += frame
    if rng.random() < 0.1:  # framing noise: the connection is answered and closed
        stream += mutate(stream[-20:], rng) + rng.randbytes(rng.randint(1, 64))
    if rng.random() < 0.05:  # a header announcing a large frame that never comes
        stream += struct.pack("<IBBHI", rng.randint(9, 16 << 20), 0, 0, 10, 9999)
    received = await _exchange(address, bytes(stream), 0.3)
    for frame in FrameDecoder().feed(received):
        findings.saw(f"native:{_native_name(frame.code)}")
        if frame.code == Code.SYSTEM_ERROR:
            findings.internal_error(
                "native", repr(frame.body[:300]), sent.get(frame.request_id, b"")
            )


# -- remoting frames, sniffed on the native and name-server ports -----------------------------


def _remoting_name(code: int) -> str:
    try:
        return RemotingResponse(code).name
    except ValueError:
        return str(code)


def _internal(answer: RemotingCommand) -> bool:
    remark = answer.remark or ""
    return answer.code == RemotingResponse.SYSTEM_ERROR and remark.startswith(
        ("internal error", "cannot encode")
    )


async def _exchange(address: str, stream: bytes, seconds: float) -> bytes:
    """Write ``stream`` and read what comes back for ``seconds`` (or until closed)."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    received = bytearray()
    try:
        writer.write(stream)
        await writer.drain()
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                data = await asyncio.wait_for(reader.read(1 << 20), left)
            except (TimeoutError, ConnectionError):
                break
            if not data:
                break
            received += data
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return bytes(received)


async def _remoting_session(
    address: str, rng: random.Random, names: FuzzNames, findings: Findings
) -> None:
    sent: dict[int, bytes] = {}
    stream = bytearray()
    hostile = rng.random() < 0.3  # else well-formed frames only, to reach the handlers
    for opaque in range(1, 1 + rng.randint(1, 40)):
        frame = remoting_request(rng, names, opaque, 0.15 if hostile else 0.0)
        if hostile and rng.random() < 0.15:
            frame = mutate(frame, rng)
        sent[opaque] = frame
        stream += frame
    if rng.random() < 0.05:  # a frame announced large that never comes
        stream += struct.pack(">II", rng.randint(100, 16 << 20), 30) + b'{"code":105,'
    decoder = RemotingFrameDecoder()
    received = await _exchange(address, bytes(stream), 0.3)
    with contextlib.suppress(Exception):  # what we read may end mid-frame
        for answer in decoder.feed(received):
            findings.saw(f"remoting:{_remoting_name(answer.code)}")
            if _internal(answer):
                findings.internal_error(
                    "remoting", f"{answer.code} {answer.remark}", sent.get(answer.opaque, b"")
                )


async def _sniffer_session(address: str, rng: random.Random, findings: Findings) -> None:
    """First bytes that are neither protocol, or stop before telling (a few, then silence)."""
    overlap = b"\x00\x01\x00\x00\x00\x00\x01\x00" + rng.randbytes(5)  # native HELLO and JSON
    first = rng.choice([rng.randbytes(rng.randint(1, 12)), rng.randbytes(64), overlap])
    await _exchange(address, first, 0.05)
    findings.saw("sniffer")


async def _fuzz_native(
    addresses: tuple[str, str], seed: int, names: FuzzNames, findings: Findings
) -> int:
    """Sessions on the broker's port (native and remoting) and on its name server's (remoting),
    eight at a time."""
    broker, namesrv = addresses
    rng = random.Random(seed)
    sessions = 0
    end = time.monotonic() + PORT_SECONDS
    while time.monotonic() < end:
        batch = [
            _native_session(broker, random.Random(rng.random()), names, findings) for _ in range(4)
        ]
        batch += [
            _remoting_session(address, random.Random(rng.random()), names, findings)
            for address in (broker, namesrv, namesrv)
        ]
        batch.append(_sniffer_session(rng.choice(addresses), random.Random(rng.random()), findings))
        await asyncio.gather(*batch)
        sessions += len(batch)
    return sessions


# -- gRPC port --------------------------------------------------------------------------------

_GRPC_METHODS = [
    m for m in v2.DESCRIPTOR.services_by_name["MessagingService"].methods if not m.client_streaming
]


def _fuzz_grpc(address: str, seed: int, names: FuzzNames, findings: Findings) -> int:
    rng = random.Random(seed)
    calls = 0
    end = time.monotonic() + PORT_SECONDS
    with grpc.insecure_channel(address) as channel:
        while time.monotonic() < end:
            method = rng.choice(_GRPC_METHODS)
            request_class = getattr(v2, method.input_type.name)
            response_class = getattr(v2, method.output_type.name)
            raw = protobuf_request(request_class, rng, names)
            if rng.random() < 0.3:
                raw = mutate(raw, rng)
            path = SERVICE + method.name
            metadata = (("x-mq-client-id", f"fuzz-{rng.randint(0, 3)}"),)
            calls += 1
            try:
                if method.server_streaming:
                    replies = list(channel.unary_stream(path)(raw, timeout=3, metadata=metadata))
                else:
                    replies = [channel.unary_unary(path)(raw, timeout=3, metadata=metadata)]
            except grpc.RpcError as exc:
                findings.saw(f"grpc:{exc.code().name}")
                if exc.code() in GRPC_INTERNAL:
                    findings.internal_error(method.name, f"{exc.code()} {exc.details()}", raw)
                continue
            for reply in replies:
                status = response_class.FromString(reply).status
                findings.saw(f"grpc:{_v2_name(status.code)}")
                if status.code in V2_INTERNAL:
                    findings.internal_error(method.name, f"{status.code} {status.message}", raw)
    return calls


def _v2_name(code: int) -> str:
    try:
        return str(d.Code.Name(code))
    except ValueError:
        return str(code)


# -- the well-behaved client ------------------------------------------------------------------


async def _probe(address: str, topic: str, group: str, stop: asyncio.Event) -> list[float]:
    """Send one message and receive it, again and again; the latency of each round."""
    rounds: list[float] = []
    async with (
        Producer(servers=address) as producer,
        SimpleConsumer(group, topic, servers=address, await_duration=1.0) as consumer,
    ):
        while not stop.is_set():
            started = time.monotonic()
            sent = await asyncio.wait_for(
                producer.send(Message(topic=topic, body=b"probe")), PROBE_LATENCY
            )
            got: list[Any] = []
            while not any(m.message_id == sent.message_id for m in got):
                batch = await asyncio.wait_for(consumer.receive(16), PROBE_LATENCY)
                got += batch
                for message in batch:
                    await consumer.ack(message)
                assert time.monotonic() - started < PROBE_LATENCY, "the probe's message is late"
            rounds.append(time.monotonic() - started)
            await asyncio.sleep(0.1)
    return rounds


async def _ask(address: str, request: RemotingCommand) -> RemotingCommand:
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(encode_command(request))
        decoder = RemotingFrameDecoder()
        while True:
            data = await reader.read(1 << 20)
            assert data, "the name server closed the probe's connection"
            for answer in decoder.feed(data):
                return answer
    finally:
        writer.close()


async def _route_probe(namesrv: str, topic: str, stop: asyncio.Event) -> list[float]:
    """Fetch ``topic``'s route over remoting from the name server, again and again."""
    rounds: list[float] = []
    opaque = 0
    while not stop.is_set():
        started = time.monotonic()
        opaque += 1
        request = RemotingCommand(RemotingCode.GET_ROUTEINFO_BY_TOPIC, opaque, 0, {"topic": topic})
        answer = await asyncio.wait_for(_ask(namesrv, request), PROBE_LATENCY)
        assert answer.opaque == opaque
        assert answer.code == RemotingResponse.SUCCESS, answer.remark
        rounds.append(time.monotonic() - started)
        await asyncio.sleep(0.2)
    return rounds


async def test_every_port_survives_hostile_input(broker: BrokerProcess) -> None:
    probe_topic, probe_group = "probe-topic", "probe-group"
    names = FuzzNames("fuzz-topic", "fuzz-group")
    async with Admin(servers=broker.address) as admin:
        for topic in (probe_topic, names.topic):
            await admin.create_topic(topic, queues=2)
        for group in (probe_group, names.group):
            await admin.create_group(group)
    async with Producer(servers=broker.address) as producer:
        for n in range(20):
            await producer.send(Message(topic=names.topic, body=b"fuzz %d" % n, keys=("k",)))
    rss_before = _rss_mib(broker)
    log_before = len(broker.log())
    findings = Findings()
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe(broker.address, probe_topic, probe_group, stop))
    route_probe = asyncio.create_task(_route_probe(broker.namesrv, probe_topic, stop))
    try:
        addresses = (broker.address, broker.namesrv)
        sessions = await _fuzz_native(addresses, SEED, names, findings)
        calls = await asyncio.to_thread(_fuzz_grpc, broker.grpc, SEED + 1, names, findings)
    finally:
        stop.set()
        rounds = await probe
        route_rounds = await route_probe
    rss_grown = _rss_mib(broker) - rss_before
    written = broker.log()[log_before:]
    summary = f"seed {SEED}: {sessions} sessions, {calls} gRPC calls, {findings.answers}"
    print(summary)
    assert not findings.internal, "internal errors:\n" + "\n".join(findings.internal)
    assert rounds, "the well-behaved client completed no round"
    assert max(rounds) < PROBE_LATENCY, summary
    assert route_rounds, "the well-behaved remoting client completed no round"
    assert max(route_rounds) < PROBE_LATENCY, summary
    assert findings.answers.get("remoting:SUCCESS"), summary  # the fuzz reached the handlers
    assert rss_grown < RSS_BOUND_MIB, f"RSS grew by {rss_grown} MiB"
    assert "Traceback" not in written, written[written.index("Traceback") - 500 :][:4000]
    assert broker.running
