"""A long poll woken by a send is answered in the send's loop turn, not one turn later, and the
answers finishing in that turn still leave in one write per connection (server/serving.py,
``WriteBehind``; docs/benchmarks.md, "Writes per delivered message (issue 32)").

A real broker and its native handlers behind two connections driven without sockets: a
consumer's parked pulls and a producer's send. The test task's own wake-up, queued after the
send was read, runs at the end of the next loop turn: what is written by then was written in
that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker import Broker, BrokerConfig, GroupConfig
from pocketmq.protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    RequestCode,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.server.native.connection import ServerConnection
from pocketmq.server.native.handlers import broker_handlers
from pocketmq.server.serving import answers_expected
from tests.server.conftest import FakeTransport


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), broker_name="b1"))
    broker.create_topic("orders", queues=2)
    broker.create_group(GroupConfig("g"))
    yield broker
    await broker.close()


async def _unused() -> Any:
    raise AssertionError("not asked")


def _request(code: int, request_id: int, body: Any) -> bytes:
    return encode_frame(FrameKind.REQUEST, code, request_id, encode_body(body))


def _connected(broker: Broker, client_id: str) -> tuple[ServerConnection, FakeTransport]:
    handlers = broker_handlers(broker, lambda topic: _unused(), _unused, _unused)
    connection = ServerConnection(handlers, lambda c: None, set())
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    hello = w.HelloRequest(PROTOCOL_VERSION, client_id, "1")
    connection.data_received(_request(RequestCode.HELLO, 1, hello))
    transport.written.clear()
    return connection, transport


def _pull(request_id: int, queue_id: int) -> bytes:
    pull = w.PullRequest("g", "orders", queue_id, 0, 32, "*", 10_000)
    return _request(RequestCode.PULL, request_id, pull)


def _send(*queues: int) -> bytes:
    messages = [w.InboundMessage("orders", b"m", queue_id=q) for q in queues]
    return _request(RequestCode.SEND, 7, w.SendRequest(messages, "p"))


def _answered(written: list[bytes]) -> list[int]:
    decoder = FrameDecoder()
    return [frame.request_id for data in written for frame in decoder.feed(data)]


async def _parked(consumer: ServerConnection, *queues: int) -> None:
    for n, queue_id in enumerate(queues):
        consumer.data_received(_pull(100 + n, queue_id))
    for _ in range(3):
        await asyncio.sleep(0)  # the long polls' tasks start and wait


async def test_a_woken_pull_is_answered_in_the_send_s_turn(broker: Broker) -> None:
    consumer, to_consumer = _connected(broker, "consumer")
    producer, to_producer = _connected(broker, "producer")
    await _parked(consumer, 0)
    assert to_consumer.written == []
    producer.data_received(_send(0))
    assert _answered(to_producer.written) == [7]  # the send's answer: within its read
    await asyncio.sleep(0)  # the end of the next turn
    assert _answered(to_consumer.written) == [100]


async def test_the_pulls_a_send_wakes_on_one_connection_leave_in_one_write(
    broker: Broker,
) -> None:
    consumer, to_consumer = _connected(broker, "consumer")
    producer, _ = _connected(broker, "producer")
    await _parked(consumer, 0, 1)
    producer.data_received(_send(0, 1))
    await asyncio.sleep(0)
    assert len(to_consumer.written) == 1
    assert sorted(_answered(to_consumer.written)) == [100, 101]


def test_a_wake_up_outside_a_running_loop_queues_nothing() -> None:
    answers_expected()  # no loop, so no handler to answer: nothing to write, no error
