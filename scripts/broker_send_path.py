"""The broker's send path alone, in one process, for instruction counts.

A real ``Broker`` and its native handlers behind a ``ServerConnection`` with a stub transport
(no socket), fed SEND frames one per read, as ``scripts/profile_workloads.py``'s lone-send
workload does. Two modes:

- ``lone``: one 1 KiB message per SEND frame (an await-each producer);
- ``batch``: 64 messages per SEND frame, as the SDK's default ``Producer`` sends them with many
  in flight (``SendMessages.body``: one queue for the whole batch).

The frames for ``N`` messages are always built, and a warm-up (queue and index files created)
always fed; only the measured frames are fed with ``N`` and skipped with ``--idle``, so
(count with N − count with ``--idle``) / N is the broker's instructions per message, a figure a
shared machine does not disturb (docs/benchmarks.md, "Broker send path (issue 32, third
slice)"):

    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind \
        python scripts/broker_send_path.py batch 6400
    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind \
        python scripts/broker_send_path.py batch 6400 --idle
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile

from pocketmq.broker import Broker, BrokerConfig
from pocketmq.client.convert import to_wire
from pocketmq.client.message import Message
from pocketmq.protocol import PROTOCOL_VERSION, FrameKind, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.body import encode_body
from pocketmq.protocol.frames import encode_frame
from pocketmq.server.native.connection import ServerConnection
from pocketmq.server.native.handlers import broker_handlers
from pocketmq.server.rpcstats import RpcLatency
from pocketmq.store import StoreConfig

QUEUES = 8
WARM_UP = 512


class _Transport:
    """Counts the writes (one per answered read) and their bytes."""

    written = 0
    bytes_written = 0

    def write(self, data: bytes) -> None:
        self.written += 1
        self.bytes_written += len(data)

    def pause_reading(self) -> None:
        """Never called: a read of one frame stays under the yield threshold."""

    def resume_reading(self) -> None:
        """Never called."""

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None


def _frames(count: int, per_frame: int, first_id: int, topic: str) -> list[bytes]:
    """SEND frames of ``per_frame`` 1 KiB messages each, ``count`` messages in all."""
    body = b"x" * 1024
    frames = []
    for number in range(0, count, per_frame):
        queue_id = (number // per_frame) % QUEUES
        wires = []
        for _ in range(min(per_frame, count - number)):
            wire = to_wire(Message(topic=topic, body=body))
            wires.append(
                w.InboundMessage(
                    wire.topic, wire.body, wire.properties, queue_id, 0, wire.born_timestamp
                )
            )
        request = encode_body(w.SendRequest(wires, "producers"))
        frames.append(
            encode_frame(FrameKind.REQUEST, RequestCode.SEND, first_id + len(frames), request)
        )
    return frames


async def _nothing(*_: object) -> None:
    return None


def greeted_connection(
    broker: Broker, latency: RpcLatency | None = None
) -> tuple[ServerConnection, _Transport]:
    """A native connection to ``broker``'s handlers over a stub transport, its HELLO answered
    (request id 1): what scripts/profile_workloads.py's lone-send workload and
    scripts/broker_consume_path.py feed too. ``latency``: the request-latency metric a served
    port gives its connections (none by default, as the figures of docs/benchmarks.md were
    measured)."""
    handlers = broker_handlers(broker, _nothing, _nothing, _nothing)  # type: ignore[arg-type]
    transport = _Transport()
    connection = ServerConnection(handlers, lambda c: None, set(), latency=latency)
    connection.connection_made(transport)  # type: ignore[arg-type]
    hello = w.HelloRequest(PROTOCOL_VERSION, "send-path", "0")
    connection.data_received(
        encode_frame(FrameKind.REQUEST, RequestCode.HELLO, 1, encode_body(hello))
    )
    return connection, transport


async def run(count: int, per_frame: int, idle: bool, latency: bool = False) -> None:
    """Feed the warm-up, then (unless ``idle``) ``count`` messages, ``per_frame`` a frame."""
    directory = tempfile.mkdtemp(prefix="pocketmq-send-path-")
    # no flow control (under callgrind the loop runs ~50x slower than its lag limit assumes)
    # and no timed work (flushes, checkpoints) that would grow with callgrind's slowdown
    store = StoreConfig(flush_interval=3600.0, checkpoint_interval=3600.0, flush_dirty_bytes=2**40)
    broker = Broker(BrokerConfig(data_dir=directory, max_queue_wait=3600.0, store=store))
    await broker.start()
    try:
        broker.create_topic("path", queues=QUEUES)
        connection, transport = greeted_connection(broker, RpcLatency() if latency else None)
        warm_up = _frames(WARM_UP, per_frame, 2, "path")
        frames = _frames(count, per_frame, 2 + len(warm_up), "path")
        fed = warm_up if idle else warm_up + frames
        # no await between frames: with an asynchronous flush and no slave a send is answered
        # inline, and the broker's own tasks are not the send path
        for frame in fed:
            connection.data_received(frame)
        await asyncio.sleep(0)
        assert transport.written == len(fed) + 1, transport.written
        stats = broker.store.statistics()
        expected = WARM_UP + (0 if idle else count)
        assert stats.messages_put == expected, (stats, expected, broker.counters)
    finally:
        await broker.close()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    """``lone|batch N [--idle] [--latency]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("lone", "batch"))
    parser.add_argument("count", type=int)
    parser.add_argument("--idle", action="store_true", help="build the frames, do not feed them")
    parser.add_argument(
        "--latency", action="store_true", help="time each request as a served port does"
    )
    args = parser.parse_args()
    asyncio.run(run(args.count, 1 if args.mode == "lone" else 64, args.idle, args.latency))


if __name__ == "__main__":
    main()
