"""The push consumer's worker path alone, in one process, for instruction counts.

``N`` one-message batches go through what a consumer does per message — the work queue, the
process queue, the view, the listener call and its verdict, the outcome report, the commit
offset — with the broker's side faked (reports and offsets go nowhere). Run it under callgrind
with ``N`` and with 0; the difference over ``N`` is the instructions per message, a figure a
shared machine does not disturb (docs/benchmarks.md, "Compiled consumer path"):

    PYTHONPATH=src:. valgrind --tool=callgrind python scripts/consumer_worker_path.py 3000 async
    PYTHONPATH=src:. POCKETMQ_NO_EXTENSIONS=1 valgrind --tool=callgrind \
        python scripts/consumer_worker_path.py 0 inline

``async``: the default consumer's ``async def`` listener; ``inline``: a plain function called on
the loop (``PushConsumerConfig(listener_thread=False)``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from tests.client.consumer.fakes import detached_state

from pocketmq import properties as props
from pocketmq.client.consumer.hotpath import (
    ConcurrentConsumer,
    ListenerCall,
    OutcomeReports,
    ProcessQueue,
    WorkQueue,
)
from pocketmq.client.message import ConsumeStatus, MessageView
from pocketmq.protocol import structs as w


class _Connection:
    address = "b:1"

    def oneway(self, code: object, body: object) -> None:
        """A report goes nowhere."""


def _listener(inline: bool) -> Any:
    def plain(views: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.SUCCESS

    async def coroutine(views: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.SUCCESS

    return plain if inline else coroutine


async def run(count: int, inline: bool) -> None:
    """Consume ``count`` messages pulled 32 at a time, one per listener call."""
    connection = _Connection()
    state = detached_state(connection)
    call = ListenerCall(_listener(inline), 30, in_thread=False)
    consumer = ConcurrentConsumer(state, call, OutcomeReports(state), None)
    work: WorkQueue[tuple[ProcessQueue, list[w.Delivered]]] = WorkQueue(64)
    pq = ProcessQueue(("b", "T", 0), connection.address, "*")
    body, me = b"x" * 1024, asyncio.current_task()
    for start in range(0, count, 32):
        pulled = [
            w.Delivered("T", 0, n, body, {props.MESSAGE_ID: f"M{n}", props.TAGS: "a"}, 1, 2, n)
            for n in range(start, min(count, start + 32))
        ]
        pq.next_offset = start + 32
        await work.put_many([(pq, [message]) for message in pq.add(pulled)])
        while (item := work.take()) is not None:
            await consumer.consume(item[0], item[1], me)
            work.task_done()
    assert state.counters.consumed == count


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]), sys.argv[2] == "inline"))
