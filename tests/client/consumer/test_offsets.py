"""A push consumer's offset store takes the commit offset of every owned queue that finished
messages since it last looked, when it persists (client/consumer/offsets.py): the workers only
flag their process queue, and nothing finished before a persist is left out of it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

from pocketmq.client.consumer.hotpath import (
    ConcurrentConsumer,
    ListenerCall,
    OutcomeReports,
    ProcessQueue,
)
from pocketmq.client.consumer.offsets import LocalOffsetStore
from pocketmq.client.message import ConsumeStatus, MessageView
from pocketmq.protocol import structs as w
from tests.client.consumer.fakes import detached_state


class _Connection:
    address = "b:1"

    def oneway(self, code: object, body: object) -> None:
        """Reports go nowhere."""


async def _succeed(views: list[MessageView]) -> ConsumeStatus:
    return ConsumeStatus.SUCCESS


async def test_a_persist_commits_what_the_workers_finished_since_the_last(tmp_path: Path) -> None:
    connection = _Connection()
    state = detached_state(connection)
    pq = ProcessQueue(("b", "T", 0), connection.address, "*")
    state.queues = {pq.key: pq}
    store = LocalOffsetStore(state, tmp_path / "offsets.json")
    consumer = ConcurrentConsumer(
        state, ListenerCall(_succeed, 30), OutcomeReports(state), SimpleNamespace()
    )
    pq.next_offset = 4
    pulled = pq.add([w.Delivered("T", 0, n, b"x", {}, 0, 0, n) for n in range(4)])
    me = asyncio.current_task()
    for message in pulled[:3]:  # offsets 0..2 finished, 3 still in hand
        await consumer.consume(pq, [message], me)
    await store.persist()
    assert json.loads(store.path.read_text()) == {"b@T@0": 3}
    assert not pq.unmarked
    await consumer.consume(pq, [pulled[3]], me)
    await store.persist()
    assert json.loads(store.path.read_text()) == {"b@T@0": 4}
