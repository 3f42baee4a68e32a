"""The broker's side of one message in ``pocketmq bench latency``'s workload, in one process, for
instruction counts: a lone SEND that wakes a parked long-poll PULL of its queue.

A real ``Broker`` and its native handlers behind two ``ServerConnection`` objects with stub
transports (no socket, ``scripts/broker_send_path.py``): per message, the consumer's PULL at the
queue's next offset parks (nothing there yet), the producer's SEND of one 1 KiB message to that
queue is read (appended, answered, the pull woken) and the loop runs until the pull's answer is
written. Queues are taken in turn, as the default ``Producer`` spreads sends. A warm-up is always
fed; the measured messages are skipped with ``--idle``, so (count with N − count with
``--idle``) / N is the broker's instructions per message on this path (docs/benchmarks.md,
"The woken pull answered from the append (issue 32)"). ``--store`` runs only the store's part,
without the broker's timers (whose runs grow with callgrind's wall time): per message one
``MessageStore.append`` of one message and the ``get_messages`` of its offset:

    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind \
        python scripts/broker_woken_path.py 2000
    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind \
        python scripts/broker_woken_path.py 2000 --idle
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile

from broker_send_path import greeted_connection  # scripts/, on the path as this script's

from pocketmq.broker import Broker, BrokerConfig, GroupConfig
from pocketmq.client.convert import to_wire
from pocketmq.client.message import Message
from pocketmq.protocol import FrameKind, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.body import encode_body
from pocketmq.protocol.frames import encode_frame
from pocketmq.store import MessageStore, StoreConfig, StoreMessage

TOPIC = GROUP = "woken"
QUEUES = 4
WARM_UP = 256


def _messages(count: int, first_id: int) -> list[tuple[bytes, bytes]]:
    """(PULL frame, SEND frame) per message, queues in turn, offsets from 0."""
    body = b"x" * 1024
    frames = []
    for number in range(count):
        queue_id = number % QUEUES
        wire = to_wire(Message(topic=TOPIC, body=body))
        inbound = w.InboundMessage(
            wire.topic, wire.body, wire.properties, queue_id, 0, wire.born_timestamp
        )
        send = encode_body(w.SendRequest([inbound], "producers"))
        pull = encode_body(w.PullRequest(GROUP, TOPIC, queue_id, number // QUEUES, 32, "*", 30_000))
        request_id = first_id + 2 * number
        frames.append(
            (
                encode_frame(FrameKind.REQUEST, RequestCode.PULL, request_id, pull),
                encode_frame(FrameKind.REQUEST, RequestCode.SEND, request_id + 1, send),
            )
        )
    return frames


async def run(count: int, idle: bool) -> None:
    """Feed the warm-up, then (unless ``idle``) ``count`` messages."""
    directory = tempfile.mkdtemp(prefix="pocketmq-woken-path-")
    store = StoreConfig(flush_interval=3600.0, checkpoint_interval=3600.0, flush_dirty_bytes=2**40)
    broker = Broker(BrokerConfig(data_dir=directory, max_queue_wait=3600.0, store=store))
    await broker.start()
    try:
        broker.create_topic(TOPIC, queues=QUEUES)
        broker.create_group(GroupConfig(GROUP))
        consumer, to_consumer = greeted_connection(broker)
        producer, to_producer = greeted_connection(broker)
        frames = _messages(WARM_UP + (0 if idle else count), 2)
        for pull, send in frames:
            consumer.data_received(pull)
            await asyncio.sleep(0)  # the long poll's task starts and parks
            answered = to_consumer.written
            producer.data_received(send)
            await asyncio.sleep(0)  # the woken pull runs, its answer is written
            assert to_consumer.written == answered + 1, "the pull was not answered"
        assert to_producer.written == len(frames) + 1
        assert broker.store.statistics().messages_put == len(frames)
    finally:
        await broker.close()
        shutil.rmtree(directory, ignore_errors=True)


def run_store(count: int, idle: bool, read: bool = True) -> None:
    """The store's part alone: ``count`` (plus the warm-up) appends of one 1 KiB message, each
    followed by the read of its offset (what the woken pull asks) unless not ``read``."""
    directory = tempfile.mkdtemp(prefix="pocketmq-woken-store-")
    config = StoreConfig(flush_interval=3600.0, checkpoint_interval=3600.0, flush_dirty_bytes=2**40)
    store = MessageStore.open(directory, config)
    try:
        body = b"x" * 1024
        for number in range(WARM_UP + (0 if idle else count)):
            queue_id = number % QUEUES
            properties = {"UNIQ_KEY": f"{number:032X}"}
            [put] = store.append([StoreMessage(TOPIC, queue_id, body, properties, 0, 1, b"")])
            if read:
                got = store.get_messages(TOPIC, queue_id, put.queue_offset)
                assert got.messages[0].queue_offset == put.queue_offset
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    """``N [--idle] [--store]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("count", type=int)
    parser.add_argument("--idle", action="store_true", help="feed only the warm-up")
    parser.add_argument("--store", action="store_true", help="only the store's append and read")
    parser.add_argument("--no-read", action="store_true", help="with --store: appends only")
    args = parser.parse_args()
    if args.store:
        run_store(args.count, args.idle, not args.no_read)
    else:
        asyncio.run(run(args.count, args.idle))


if __name__ == "__main__":
    main()
