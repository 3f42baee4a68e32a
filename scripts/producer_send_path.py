"""The default producer's send path alone, in one process, for instruction counts.

``N`` 1 KiB messages go through the real :class:`~pocketmq.client.Producer` (validation, the
message id, the wire form, the accumulator, the sender's retry loop, the queue selector) and a
real :class:`~pocketmq.client.connection.ClientConnection` (request ids, frames, coalesced
writes, matching answers to futures). Only the socket is faked: the connection's transport
answers each SEND frame it is given with a canned answer for that many messages, encoded by the
real protocol encoders, delivered to ``data_received`` on the next turn of the event loop as a
broker's answer would be. Everything from ``Producer.send`` to the settled ``SendResult`` runs.

Run it under callgrind with ``N`` and with 0; the difference over ``N`` is the instructions per
message, a figure a shared machine does not disturb (docs/benchmarks.md, "Producer send path"):

    PYTHONPATH=src:. valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python scripts/producer_send_path.py 3000 lone
    PYTHONPATH=src:. POCKETMQ_NO_EXTENSIONS=1 valgrind --tool=callgrind ... 0 batched

``lone``: each send awaited before the next (the producer's await-each path); ``batched``: 256
sends in flight from 256 tasks, as ``pocketmq bench`` drives them (adaptive batching joins them
into requests of up to 64). Both runs first send :data:`WARM_UP` messages, so one-time costs
(routes, decoders, caches) are in both and cancel out. The last line printed says how many
requests carried the messages.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import time
from typing import Any

from pocketmq import Message
from pocketmq.bench.broker import in_flight
from pocketmq.client import ClientConfig, Producer, ProducerConfig
from pocketmq.client.connection import ClientConnection
from pocketmq.client.producer import sender
from pocketmq.client.routes import QueueRef, Route
from pocketmq.errors import Code
from pocketmq.protocol import FrameKind, RequestCode, encode_body, encode_frame
from pocketmq.protocol import structs as w
from pocketmq.protocol.limits import HEADER_SIZE

ADDRESS = "127.0.0.1:10911"
TOPIC = "bench-produce"
BODY = b"x" * 1024
WARM_UP = 512
WIDTH = 256
_HEADER = struct.Struct("<IBBHI")  # the frame header (docs/protocol.md, "Frames")


class CannedBroker:
    """The transport under the connection (the part of ``asyncio.Transport`` it uses): each
    SEND frame written is answered with a canned, correctly encoded ``SendResponse`` holding one
    stored result per message, on the next loop turn."""

    def __init__(self) -> None:
        self.connection: ClientConnection | None = None
        self._answers: dict[int, bytes] = {}  # messages per request -> the answer's body
        self.requests = self.messages = 0

    def write(self, data: bytes) -> None:
        """Answer every frame of ``data`` (a write may carry several coalesced frames)."""
        answers, position = [], 0
        while position < len(data):
            length, kind, _flags, code, request_id = _HEADER.unpack_from(data, position)
            if kind != FrameKind.REQUEST or code != RequestCode.SEND:
                # unanswered, it would leave the run waiting for ever (an exception here is
                # only logged by the event loop)
                print(f"the fake broker got frame kind {kind} code {code}", file=sys.stderr)
                os._exit(3)
            count = _message_count(data, position + HEADER_SIZE)
            answers.append(
                encode_frame(FrameKind.RESPONSE, Code.SUCCESS, request_id, self._answer(count))
            )
            position += 4 + length  # the length counts the header after itself, and the body
            self.requests += 1
            self.messages += count
        assert self.connection is not None
        asyncio.get_running_loop().call_soon(self.connection.data_received, b"".join(answers))

    def _answer(self, count: int) -> bytes:
        body = self._answers.get(count)
        if body is None:
            item = w.SendResultItem(int(Code.SUCCESS), "", "0" * 32, 3, 1000, "", 123_456)
            body = self._answers[count] = encode_body(w.SendResponse([item] * count, "broker-a"))
        return body

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        assert self.connection is not None
        asyncio.get_running_loop().call_soon(self.connection.connection_lost, None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _message_count(data: bytes, at: int) -> int:
    """How many messages a SEND body holds: a MessagePack array of the request's 3 fields whose
    first is the array of messages (fixarray, or array 16)."""
    assert data[at] == 0x93, data[at]
    head = data[at + 1]
    if head & 0xF0 == 0x90:
        return head & 0x0F
    assert head == 0xDC, head
    return int.from_bytes(data[at + 2 : at + 4], "big")


def _wire_up(producer: Producer) -> CannedBroker:
    """A cached route of 8 queues on one broker, and its open connection over the fake."""
    queues = tuple(QueueRef("broker-a", ADDRESS, q, 6) for q in range(8))
    route = Route(TOPIC, "normal", queues, {"broker-a": ADDRESS}, time.monotonic())
    producer.routes._routes[TOPIC] = route
    broker = CannedBroker()
    connection = ClientConnection(ADDRESS, None)
    connection.connection_made(broker)  # type: ignore[arg-type]
    broker.connection = connection
    producer.pool._connections[ADDRESS] = connection
    return broker


async def run(count: int, batched: bool) -> None:
    """Send ``WARM_UP`` and then ``count`` messages, one at a time or ``WIDTH`` in flight.

    The default producer, with its time limits moved out of reach: under callgrind a request
    waits 50 times longer than it would, a send unanswered for 0.5 s would start watching its
    topic's route, and the routes would be refreshed every 30 s (the fake answers sends only).
    Both timers are still set per request, as they are by default (the watch's delay stays
    below the send timeout).
    """
    sender.WATCH_AFTER = 1e6
    config = ProducerConfig(send_timeout=1e7)
    client = ClientConfig(route_refresh_interval=1e7)  # the fake answers sends only
    async with Producer(servers=ADDRESS, config=config, client=client) as producer:
        broker = _wire_up(producer)
        message = Message(topic=TOPIC, body=BODY)
        for total in (WARM_UP, count):
            if batched:
                await in_flight(total, WIDTH, lambda: producer.send(message))
            else:
                for _ in range(total):
                    await producer.send(message)
        sent = producer.statistics().sent
    assert sent == WARM_UP + count == broker.messages, (sent, broker.messages)
    print(f"{broker.messages} messages in {broker.requests} requests")


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]), sys.argv[2] == "batched"))
