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
import gc
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
    decode_body,
    encode_body,
    encode_frame,
)
from pocketmq.protocol import structs as w
from pocketmq.server import serving
from pocketmq.server.native.connection import ServerConnection
from pocketmq.server.native.handlers import broker_handlers
from pocketmq.server.serving import answers_expected, write_behind
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


async def test_a_woken_pull_is_answered_without_reading_the_log(broker: Broker) -> None:
    """The store answers the pull at the offset just appended from the message its append kept
    (``Reader.appended``; docs/design.md, "One message's path"): no read of the log."""
    reads: list[int] = []
    commitlog = broker.store._reader._commitlog

    class Counted:
        def read(self, offset: int, size: int) -> bytes | None:
            reads.append(offset)
            return commitlog.read(offset, size)

        def __getattr__(self, name: str) -> Any:
            return getattr(commitlog, name)

    broker.store._reader._commitlog = Counted()  # type: ignore[assignment]
    consumer, to_consumer = _connected(broker, "consumer")
    producer, _ = _connected(broker, "producer")
    await _parked(consumer, 0)
    producer.data_received(_send(0))
    await asyncio.sleep(0)
    [frame] = FrameDecoder().feed(b"".join(to_consumer.written))
    answer = decode_body(frame.body, w.PullResponse)
    assert [(m.queue_offset, m.body) for m in answer.messages] == [(0, b"m")]
    assert reads == []


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


class _Answering:
    """What ``WriteBehind`` asks of a connection: write what it holds (or fail to)."""

    def __init__(self, fail: bool = False) -> None:
        self.flushes = 0
        self.fail = fail

    def _flush_later(self) -> None:
        self.flushes += 1
        if self.fail:
            raise RuntimeError("unable to perform operation: the handler is closed")


async def test_a_waiting_answer_leaves_in_one_turn_however_often_a_newer_flush_is_queued() -> None:
    """Wake-ups queued ahead of the pending flush, each calling ``answers_expected``, used to
    postpone a waiting answer once per wake-up (a chain of 1,000: 1,000 turns)."""
    loop = asyncio.get_running_loop()
    behind = write_behind(loop)
    remaining = 1000
    chain_done = asyncio.Event()

    def wake_up() -> None:  # a step that wakes the next one, then notifies
        nonlocal remaining
        remaining -= 1
        if remaining:
            loop.call_soon(wake_up)
            answers_expected()
        else:
            chain_done.set()

    loop.call_soon(wake_up)
    waiting = _Answering()
    behind.add(waiting)  # type: ignore[arg-type]
    turns = 0
    while not waiting.flushes:
        await asyncio.sleep(0)
        turns += 1
    assert turns <= 2
    await chain_done.wait()


async def test_one_connection_s_failed_write_does_not_hold_back_the_others() -> None:
    loop = asyncio.get_running_loop()
    failures: list[BaseException] = []
    loop.set_exception_handler(lambda _, context: failures.append(context["exception"]))
    try:
        behind = write_behind(loop)
        broken, healthy = _Answering(fail=True), _Answering()
        behind.add(broken)  # type: ignore[arg-type]
        behind.add(healthy)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert (broken.flushes, healthy.flushes) == (1, 1)
        assert [type(e) for e in failures] == [RuntimeError]
        behind.add(healthy)  # type: ignore[arg-type]  # its next answer: a new flush
        await asyncio.sleep(0)
        assert healthy.flushes == 2
    finally:
        loop.set_exception_handler(None)


def test_a_finished_loop_is_not_kept_alive_by_its_write_behind() -> None:
    async def answer_once() -> None:
        answers_expected()
        await asyncio.sleep(0)

    before = len(serving._WRITE_BEHIND)
    for _ in range(5):
        asyncio.run(answer_once())
    gc.collect()
    assert len(serving._WRITE_BEHIND) <= before
