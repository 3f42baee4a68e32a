"""A pull's answer handed to the workers as it is read (client/consumer/pull.py, ``_HandOff``;
client/connection.py, ``begin``'s ``early``): an idle worker calls the listener in the loop turn
after the answer arrived, not two; a blocked listener still does not stall pulling, and a full
work queue still holds the answer in the pull loop (docs/semantics.md, "where the listener
runs"; the push consumer's limits). A real connection fed its answers by hand, a real loop."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from pocketmq import protocol as wire
from pocketmq.client.connection import ClientConnection
from pocketmq.client.consumer.config import PushConsumerConfig
from pocketmq.client.consumer.hotpath import (
    ConcurrentConsumer,
    ListenerCall,
    OutcomeReports,
    ProcessQueue,
    WorkQueue,
)
from pocketmq.client.consumer.pull import Puller
from pocketmq.client.consumer.state import ConsumerCounters
from pocketmq.client.message import ConsumeStatus, MessageView
from pocketmq.errors import Code
from pocketmq.protocol import structs as w
from tests.client.test_connection_writes import RecordingTransport


def _connection() -> tuple[ClientConnection, RecordingTransport]:
    connection = ClientConnection("b:1", None)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def _pulls(transport: RecordingTransport) -> list[tuple[int, w.PullRequest]]:
    """The PULL requests written so far: (request id, request)."""
    frames = wire.FrameDecoder().feed(b"".join(transport.writes))
    return [
        (f.request_id, wire.decode_body(f.body, w.PullRequest))
        for f in frames
        if f.code == wire.RequestCode.PULL
    ]


def _answer(request_id: int, offsets: list[int], status: str = "FOUND") -> bytes:
    messages = [
        w.Delivered("T", 0, offset, b"m%d" % offset, {}, 1, 2, offset, 1) for offset in offsets
    ]
    body = wire.encode_body(
        w.PullResponse(status, (offsets[-1] + 1) if offsets else 0, 0, 100, messages)
    )
    return wire.encode_frame(wire.FrameKind.RESPONSE, Code.SUCCESS, request_id, body)


def _blocking_listener() -> tuple[asyncio.Event, list[int], Any]:
    """A listener that notes the offsets it got, then waits until the event is set."""
    release = asyncio.Event()
    seen: list[int] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        seen.extend(m.queue_offset for m in messages)
        await release.wait()
        return ConsumeStatus.SUCCESS

    return release, seen, listener


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class _Consumer:
    """A pull loop of one queue and ``workers`` workers, as a push consumer wires them."""

    def __init__(self, listener: Any, *, workers: int = 1, bound: int = 2, batch: int = 1) -> None:
        self.connection, self.transport = _connection()

        async def get(address: str) -> ClientConnection:
            return self.connection

        config = PushConsumerConfig(report_outcomes=False, batch_size=batch)
        self.state: Any = SimpleNamespace(
            counters=ConsumerCounters(),
            clustering=True,
            config=config,
            group="g",
            client_id="c",
            work=WorkQueue(bound),
            client=SimpleNamespace(
                pool=SimpleNamespace(get=get, open_connections=lambda: []),
                client_config=SimpleNamespace(request_timeout=3.0),
            ),
        )
        call = ListenerCall(listener, 30.0, in_thread=False)
        self.workers = ConcurrentConsumer(self.state, call, OutcomeReports(self.state), None)  # type: ignore[arg-type]
        self.pq = ProcessQueue(("b", "T", 0), "b:1", "*")
        self.pq.next_offset = 0
        self.tasks = [asyncio.ensure_future(self.workers.worker()) for _ in range(workers)]
        self.tasks.append(asyncio.ensure_future(Puller(self.state, None).run(self.pq)))  # type: ignore[arg-type]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_an_idle_worker_calls_the_listener_in_the_turn_after_the_answer_is_read() -> None:
    seen: list[int] = []

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        seen.extend(m.queue_offset for m in messages)
        return ConsumeStatus.SUCCESS

    consumer = _Consumer(listener)
    try:
        await _settle()
        [(request_id, request)] = _pulls(consumer.transport)
        assert request.offset == 0
        consumer.connection.data_received(_answer(request_id, [0]))
        assert list(consumer.pq.messages) == [0]  # held before any worker runs
        await asyncio.sleep(0)  # one loop turn: the worker woken by the read has run
        assert seen == [0]
        await _settle()
        assert consumer.pq.next_offset == 1
        assert [r.offset for _, r in _pulls(consumer.transport)] == [0, 1]
        assert consumer.state.counters.consumed == 1
        assert not consumer.pq.messages  # finished, and added once
    finally:
        await consumer.close()


async def test_a_blocked_listener_does_not_stall_pulling() -> None:
    """The hand-off only queues the batch: the pull loop issues the next pull while the
    listener waits, and answers keep going to the work queue until it is full."""
    release, seen, listener = _blocking_listener()
    consumer = _Consumer(listener, workers=1, bound=2)
    try:
        await _settle()
        for offset in range(3):
            request_id, request = _pulls(consumer.transport)[-1]
            assert request.offset == offset
            consumer.connection.data_received(_answer(request_id, [offset]))
            await _settle()
        assert seen == [0]  # the one worker is blocked in its listener
        assert len(_pulls(consumer.transport)) == 4  # yet a fourth pull went out
        assert len(consumer.state.work) == 2
        release.set()
        await _settle()
        assert seen == [0, 1, 2]
    finally:
        await consumer.close()


async def test_a_full_work_queue_leaves_the_answer_to_the_pull_loop() -> None:
    """No room: the answer is not handed on as it is read; the pull loop puts it once the queue
    drained (put_many), in order, and pulls again only then."""
    release, seen, listener = _blocking_listener()
    consumer = _Consumer(listener, workers=1, bound=1)
    try:
        await _settle()
        request_id, _ = _pulls(consumer.transport)[-1]
        consumer.connection.data_received(_answer(request_id, [0]))  # the worker takes it
        await _settle()
        request_id, _ = _pulls(consumer.transport)[-1]
        consumer.connection.data_received(_answer(request_id, [1]))  # fills the queue
        await _settle()
        request_id, request = _pulls(consumer.transport)[-1]
        assert request.offset == 2
        consumer.connection.data_received(_answer(request_id, [2, 3]))
        assert list(consumer.pq.messages) == [0, 1]  # not taken in the read: no room
        await _settle()
        assert list(consumer.pq.messages) == [0, 1, 2, 3]  # the loop holds them, waits for room
        assert len(_pulls(consumer.transport)) == 3
        release.set()
        await _settle()
        assert seen == [0, 1, 2, 3]
        assert [r.offset for _, r in _pulls(consumer.transport)][-1] == 4
    finally:
        await consumer.close()


async def test_early_is_called_as_the_answer_is_read_and_not_for_errors() -> None:
    connection, transport = _connection()
    got: list[Any] = []
    future = connection.begin(
        wire.RequestCode.PULL, w.PullRequest("g", "T", 0, 0), w.PullResponse, 3.0, early=got.append
    )
    failed = connection.begin(
        wire.RequestCode.PULL, w.PullRequest("g", "T", 1, 0), w.PullResponse, 3.0, early=got.append
    )
    await asyncio.sleep(0)  # the second request is written in the next turn
    ids = [f.request_id for f in wire.FrameDecoder().feed(b"".join(transport.writes))]
    error = wire.encode_frame(wire.FrameKind.RESPONSE, Code.SYSTEM_ERROR, ids[1], b"")
    connection.data_received(_answer(ids[0], [5]) + error)
    assert [a.next_offset for a in got] == [6]  # in the read, before the future's waiter runs
    assert future.result() is got[0]
    assert failed.exception() is not None


async def test_an_early_call_that_raises_is_logged_and_the_request_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection, transport = _connection()

    def broken(answer: w.PullResponse) -> None:
        raise RuntimeError("a bug")

    future = connection.begin(
        wire.RequestCode.PULL, w.PullRequest("g", "T", 0, 0), w.PullResponse, 3.0, early=broken
    )
    [frame] = wire.FrameDecoder().feed(b"".join(transport.writes))
    with caplog.at_level(logging.ERROR, logger="pocketmq.client"):
        connection.data_received(_answer(frame.request_id, [0]))
    assert future.result().next_offset == 1
    assert "handing on an answer" in caplog.text
