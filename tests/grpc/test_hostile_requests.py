"""Issue 14 on the gRPC port: requests no official client sends but any peer can.

Undecodable bytes get ``INVALID_ARGUMENT`` (not ``UNKNOWN`` with a traceback in the broker's
log), a GZIP body is decompressed no further than the broker's size limit, and values the store
cannot hold are refused for their own message only."""

from __future__ import annotations

import gzip
import time
import zlib
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from pocketmq.testing import BrokerProcess

from .conftest import MAX_MESSAGE_SIZE, unique

d = definition_pb2
s = service_pb2
SERVICE = "/apache.rocketmq.v2.MessagingService/"


def _rss_mib(broker: BrokerProcess) -> int:
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def _message(topic: str, body: bytes, **system: Any) -> Any:
    system.setdefault("message_id", "01" + unique("id").replace("-", "").upper()[:32])
    system.setdefault("message_type", d.MessageType.NORMAL)
    return d.Message(
        topic=d.Resource(name=topic), body=body, system_properties=d.SystemProperties(**system)
    )


@pytest.fixture
def channel(broker: BrokerProcess) -> Any:
    with grpc.insecure_channel(broker.grpc) as opened:
        yield opened


@pytest.mark.parametrize(
    ("method", "streaming"),
    [
        ("SendMessage", False),
        ("QueryRoute", False),
        ("AckMessage", False),
        ("ReceiveMessage", True),
        ("PullMessage", True),
    ],
)
def test_undecodable_requests_are_invalid_arguments(
    broker: BrokerProcess, channel: Any, method: str, streaming: bool
) -> None:
    log_before = len(broker.log())
    # field 1 as a string holding invalid UTF-8, then bytes that are no protobuf at all
    for raw in (b"\x0a\x03\xff\xfe\xfd", b"\xff\xff\xff\xff\x0f"):
        if streaming:
            call = channel.unary_stream(SERVICE + method)
            with pytest.raises(grpc.RpcError) as failure:
                list(call(raw, timeout=5))
        else:
            call = channel.unary_unary(SERVICE + method)
            with pytest.raises(grpc.RpcError) as failure:
                call(raw, timeout=5)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not decode" in failure.value.details()
    assert "Traceback" not in broker.log()[log_before:]


def test_a_malformed_telemetry_command_gets_a_bad_request_status(channel: Any) -> None:
    telemetry = channel.stream_stream(SERVICE + "Telemetry")
    replies = list(telemetry(iter([b"\xff\xff\xff\xff\x0f"]), timeout=5))
    assert len(replies) == 1
    reply = s.TelemetryCommand.FromString(replies[0])
    assert reply.status.code == Code.BAD_REQUEST


def test_a_gzip_bomb_is_refused_without_inflating_it(
    broker: BrokerProcess, stub: Any, topic: str
) -> None:
    """256 MiB of zeros compress to 256 KiB; the broker stops at its limit (256 KiB here)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    zeros = bytes(1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()
    assert len(bomb) < MAX_MESSAGE_SIZE + (1 << 20)  # within the gRPC message limit
    before = _rss_mib(broker)
    started = time.monotonic()
    reply = stub.SendMessage(
        s.SendMessageRequest(messages=[_message(topic, bomb, body_encoding=d.Encoding.GZIP)]),
        timeout=10,
    )
    elapsed = time.monotonic() - started
    assert reply.status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert f"more than {MAX_MESSAGE_SIZE} bytes" in reply.status.message
    assert _rss_mib(broker) - before < 32
    assert elapsed < 1.0
    # a body that decompresses to exactly the limit is accepted
    exact = gzip.compress(b"z" * MAX_MESSAGE_SIZE)
    ok = stub.SendMessage(
        s.SendMessageRequest(messages=[_message(topic, exact, body_encoding=d.Encoding.GZIP)]),
        timeout=10,
    )
    assert ok.status.code == Code.OK


def test_out_of_range_values_fail_for_their_message_only(stub: Any, topic: str) -> None:
    good = _message(topic, b"good")
    ancient = _message(topic, b"born", born_timestamp={"seconds": -5})
    empty_key = _message(topic, b"props")
    empty_key.user_properties[""] = "no name"
    reply = stub.SendMessage(s.SendMessageRequest(messages=[good, ancient, empty_key]), timeout=5)
    codes = [entry.status.code for entry in reply.entries]
    assert codes == [Code.OK, Code.BAD_REQUEST, Code.ILLEGAL_MESSAGE_PROPERTY_KEY]
    assert "born_timestamp" in reply.entries[1].status.message
    assert "property name" in reply.entries[2].status.message
    assert reply.status.code == Code.MULTIPLE_RESULTS
