"""The broker's side of a push consumer draining a backlog, in one process, for instruction counts.

A real ``Broker`` and its native handlers behind a ``ServerConnection`` with a stub transport
(no socket) are fed, per 256 messages, what the SDK's default ``PushConsumer`` sends for them:
eight PULLs of 32 (one per queue of the topic, answered at once from the backlog), one
REPORT_OUTCOMES of the 256 successes (``REPORT_AT``; the broker records them in the attempt
history, the default) and one COMMIT_OFFSET; the history's intake is drained before the next
block, as the broker's own task does between deliveries. The backlog (1 KiB messages sent 32 to a
SEND, one queue per batch, as the adaptive ``Producer`` sends them) and the frames are made once
by ``prepare``, outside the count; ``consume`` copies the data directory and feeds ``N`` messages'
frames. Under callgrind, ((count at N) - (count at 0)) / N is the broker's instructions per
consumed message, a figure a shared machine does not disturb (docs/benchmarks.md, "Broker
consume path (issue 32, third slice)"):

    PYTHONPATH=src python scripts/broker_consume_path.py prepare /tmp/bcp 4096
    PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python scripts/broker_consume_path.py consume /tmp/bcp 4096
    (the same with 0)
"""

from __future__ import annotations

import asyncio
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

from broker_send_path import greeted_connection  # scripts/, on the path as this script's

from pocketmq.broker import Broker, BrokerConfig, GroupConfig
from pocketmq.client.convert import to_wire
from pocketmq.client.message import Message
from pocketmq.protocol import FrameKind, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.body import encode_body
from pocketmq.protocol.frames import encode_frame

TOPIC = GROUP = "backlog"
QUEUES = 8
PULL = 32
BLOCK = PULL * QUEUES  # messages per report (the SDK's REPORT_AT)


def _frame(kind: FrameKind, code: RequestCode, number: int, body: w.Body) -> bytes:
    return encode_frame(kind, code, number, encode_body(body))


async def prepare(directory: Path, count: int) -> None:
    """The backlog of ``count`` messages in ``directory/data`` and the consumer's frames for it
    in ``directory/frames.pickle`` (one list of frames per block); ``directory`` is new."""
    broker = Broker(BrokerConfig(data_dir=str(directory / "data")))
    await broker.start()
    ids: dict[int, list[str]] = {q: [] for q in range(QUEUES)}
    try:
        broker.create_topic(TOPIC, queues=QUEUES)
        broker.create_group(GroupConfig(GROUP))
        connection, _ = greeted_connection(broker)
        body = b"x" * 1024
        for n, start in enumerate(range(0, count, PULL)):
            queue = n % QUEUES
            wires = []
            for _ in range(min(PULL, count - start)):
                wire = to_wire(Message(topic=TOPIC, body=body))
                wires.append(w.InboundMessage(wire.topic, wire.body, wire.properties, queue, 0, 0))
                ids[queue].append(wire.properties["UNIQ_KEY"])
            connection.data_received(
                _frame(FrameKind.REQUEST, RequestCode.SEND, n + 2, w.SendRequest(wires))
            )
            await asyncio.sleep(0)
    finally:
        await broker.close()
    blocks, number = [], 10
    for block in range(count // BLOCK):
        frames, attempts = [], []
        for queue in range(QUEUES):
            offset = block * PULL
            request = w.PullRequest(GROUP, TOPIC, queue, offset, PULL, "*", 15000)
            frames.append(_frame(FrameKind.REQUEST, RequestCode.PULL, number, request))
            number += 1
            attempts += [
                w.Attempt(m, GROUP, TOPIC, 1, "c", "SUCCESS", "", 1, 2, "")
                for m in ids[queue][offset : offset + PULL]
            ]
        report = w.ReportOutcomesRequest(GROUP, "c", attempts)
        frames.append(_frame(FrameKind.ONEWAY, RequestCode.REPORT_OUTCOMES, number, report))
        offsets = [w.OffsetEntry(TOPIC, q, (block + 1) * PULL) for q in range(QUEUES)]
        commit = w.CommitOffsetRequest(GROUP, offsets)
        frames.append(_frame(FrameKind.REQUEST, RequestCode.COMMIT_OFFSET, number + 1, commit))
        number += 2
        blocks.append(frames)
    (directory / "frames.pickle").write_bytes(pickle.dumps(blocks))


async def consume(directory: Path, count: int) -> None:
    """Feed the frames of the first ``count`` messages to a broker on a copy of the backlog."""
    blocks = pickle.loads((directory / "frames.pickle").read_bytes())[: count // BLOCK]
    scratch = Path(tempfile.mkdtemp(prefix="consume-path-", dir=directory))
    shutil.copytree(directory / "data", scratch / "data")
    broker = Broker(BrokerConfig(data_dir=str(scratch / "data")))
    await broker.start()
    try:
        connection, transport = greeted_connection(broker)
        history = broker.history
        for frames in blocks:
            for frame in frames:
                connection.data_received(frame)
                await asyncio.sleep(0)
            # the broker's intake task records a slice per turn: turns are what is wanted
            while history._intake:  # noqa: ASYNC110
                await asyncio.sleep(0)
        history.flush()
        consumed = len(blocks) * BLOCK
        assert history.recorded == consumed, (history.recorded, consumed)
        assert broker.traffic.messages_out[(TOPIC, GROUP)] == consumed
        assert transport.bytes_written >= consumed * 1024
    finally:
        await broker.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    step, where, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    if step == "prepare":
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
    asyncio.run(prepare(where, n) if step == "prepare" else consume(where, n))
