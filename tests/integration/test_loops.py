"""The SDK and the broker on either event loop (``pocketmq serve --loop``, docs/semantics.md).

The rest of the suite runs the broker on the default loop (asyncio) and the SDK on pytest's
asyncio loop; these tests cover the other corners: the broker on each loop, and the SDK —
producer, push consumer, admin — on uvloop (installed with the test extra).
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import grpc
import pytest
import uvloop
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer
from pocketmq.testing import BrokerProcess

from .conftest import FAST_BROKER, unique

pytestmark = pytest.mark.integration


async def _round_trip(address: str, count: int = 20) -> list[bytes]:
    """Send ``count`` messages and consume them with a push consumer; the bodies received."""
    topic, group = unique("loop-t"), unique("loop-g")
    async with Admin(servers=address) as admin:
        await admin.create_topic(topic, queues=2)
        await admin.create_group(group)
    received: list[bytes] = []
    done = asyncio.Event()

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        received.extend(m.body for m in messages)
        if len(received) >= count:
            done.set()
        return ConsumeStatus.SUCCESS

    async with PushConsumer(group, topic, listener, servers=address):
        async with Producer(servers=address) as producer:
            for number in range(count):
                await producer.send(Message(topic=topic, body=f"m{number}".encode()))
        async with asyncio.timeout(30):
            await done.wait()
    return received


def test_the_sdk_runs_on_uvloop(broker: BrokerProcess) -> None:
    """uvloop's transports are not asyncio.Transport subclasses: the SDK used to assert they were,
    and every connection failed."""
    received = uvloop.run(_round_trip(broker.address))
    assert sorted(received) == sorted(f"m{n}".encode() for n in range(20))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop", "auto", None])
async def test_the_broker_runs_on_the_loop_it_is_given(tmp_path: Path, loop: str | None) -> None:
    """``None``: no ``--loop``, the default is ``auto`` (docs/benchmarks.md, "Event loops")."""
    with BrokerProcess(
        tmp_path / "b",
        config=FAST_BROKER,
        grpc_port=None,
        extra_args=("--loop", loop) if loop else (),
    ) as broker:
        received = await _round_trip(broker.address)
        assert len(received) == 20
        used = loop if loop in ("asyncio", "uvloop") else "uvloop"  # installed with [test]
        assert f"event loop: {used}" in broker.log()
        assert "compiled hot paths: " in broker.log()


def test_grpc_and_http_ports_serve_on_uvloop(tmp_path: Path) -> None:
    """The gRPC port's TLS-or-plaintext forwarder (the default, ``--grpc-tls permissive``) and the
    HTTP port's connection cap asserted an ``asyncio.Transport``, which uvloop's transports are
    not: on uvloop every gRPC and HTTP connection was closed at once."""
    with BrokerProcess(
        tmp_path / "b", config=FAST_BROKER, http_port=0, extra_args=("--loop", "uvloop")
    ) as broker:
        with urllib.request.urlopen(f"http://{broker.http}/healthz", timeout=10) as reply:
            assert (reply.status, reply.read()) == (200, b"ok\n")
        with grpc.insecure_channel(broker.grpc) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            topic = definition_pb2.Resource(name="no-such-topic")
            reply = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=topic), timeout=10)
        assert reply.status.code == definition_pb2.Code.TOPIC_NOT_FOUND
        assert "event loop: uvloop" in broker.log()
