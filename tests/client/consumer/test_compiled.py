"""The compiled consumer path against its pure-Python source (docs/design.md, "Compiled hot
paths"): the same random batches, listeners and broker answers given to the pure modules
(``client/_views.py``, ``client/consumer/_work.py``, ``_process_queue.py``, ``_listener.py``,
``_reports.py``, ``_consumption.py``, ``_concurrent.py``) and to their compiled twins give the
same views to the listener, the same verdicts, counters, hand-backs, retries, commit offsets and
reported attempts, and the same bytes held."""

from __future__ import annotations

import asyncio
import importlib
import random
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import msgspec
import pytest

from pocketmq import properties as props
from pocketmq.client.consumer.config import ConsumeContext
from pocketmq.client.consumer.retry import FailedAttempt
from pocketmq.client.message import ConsumeStatus, MessageView
from pocketmq.protocol import structs as w
from tests.client.consumer.fakes import detached_state
from tests.twins import compiled_twin

PACKAGE = "pocketmq.client.consumer."
MODULES = ("_work", "_process_queue", "_listener", "_reports", "_concurrent")


def _both() -> list[dict[str, ModuleType]]:
    """The pure modules and their twins, by short name (and ``_views``)."""
    pure = {name: importlib.import_module(PACKAGE + name) for name in MODULES}
    fast = {name: compiled_twin(PACKAGE + name) for name in MODULES}
    pure["_views"] = importlib.import_module("pocketmq.client._views")
    fast["_views"] = compiled_twin("pocketmq.client._views")
    return [pure, fast]


def _message(rng: random.Random, offset: int) -> w.Delivered:
    properties = {props.MESSAGE_ID: f"M{offset}"}
    if rng.random() < 0.5:
        properties[props.TAGS] = rng.choice(["a", "b", ""])
    if rng.random() < 0.3:
        properties[props.KEYS] = rng.choice(["k1", "k1 k2", ""])
    if rng.random() < 0.3:
        properties["user"] = "v"
    topic = "T"
    if rng.random() < 0.2:  # a retry, which the listener sees under its original topic
        topic, properties[props.RETRY_TOPIC] = "%RETRY%g", "T"
    return w.Delivered(
        topic,
        0,
        offset,
        rng.randbytes(rng.randint(0, 9)),
        properties,
        1,
        2,
        offset,
        rng.randint(1, 4),
    )


def _seen(view: MessageView) -> tuple[Any, ...]:
    return msgspec.structs.astuple(view)


@dataclass
class _Retry:
    """The broker's side of a hand-back: answers taken from a script, calls remembered."""

    answers: list[bool]
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def hand_back(self, pq: Any, attempt: FailedAttempt, delay_level: int) -> bool:
        message = attempt.message
        self.calls.append((message.queue_offset, attempt.outcome, attempt.error, delay_level))
        return self.answers.pop()

    def later(self, pq: Any, kept: list[w.Delivered]) -> None:
        self.calls.append(("later", [m.queue_offset for m in kept]))


class _Connection:
    address = "b:1"

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def oneway(self, code: object, body: w.ReportOutcomesRequest) -> None:
        self.sent += [(a.message_id, a.topic, a.attempt, a.outcome) for a in body.attempts]


def _listener(script: random.Random, seen: list[Any], is_async: bool, context: bool) -> Any:
    """A listener doing what the script says: a status, ``None``, a wrong value, raising, or
    moving the context's ack index (``context``: it takes one; else it is given none)."""

    def decide(views: list[MessageView], context: ConsumeContext) -> Any:
        seen.append([_seen(v) for v in views])
        choice = script.random()
        if choice < 0.15:
            context.ack_index = script.randint(-2, len(views) + 1)
        if choice < 0.05:
            context.delay_level = script.choice([-1, 0, 3])
        if 0.6 < choice < 0.65:
            raise RuntimeError("listener failed")
        if 0.65 < choice < 0.7:
            return None
        if 0.7 < choice < 0.72:
            return "SUCCESS"
        return ConsumeStatus.RECONSUME_LATER if choice > 0.9 else ConsumeStatus.SUCCESS

    async def call_async(views: list[MessageView], context: ConsumeContext) -> Any:
        return decide(views, context)

    def without(views: list[MessageView]) -> Any:
        return decide(views, ConsumeContext(len(views) - 1))  # its changes go nowhere

    async def without_async(views: list[MessageView]) -> Any:
        return without(views)

    if not context:
        return without_async if is_async else without
    return call_async if is_async else decide


async def _consume_run(modules: dict[str, ModuleType], seed: int) -> list[Any]:
    """Consume a random backlog of one queue batch by batch; everything observable, in order."""
    rng, script = random.Random(seed), random.Random(seed + 1)
    clustering, is_async = rng.random() < 0.8, rng.random() < 0.5
    connection, seen, marked = _Connection(), [], []
    state = detached_state(connection, clustering)
    call = modules["_listener"].ListenerCall(
        _listener(script, seen, is_async, seed % 3 != 0), consume_timeout=30, in_thread=False
    )
    reports = modules["_reports"].OutcomeReports(state)
    retry = _Retry([rng.random() < 0.7 for _ in range(2000)])
    consumer = modules["_concurrent"].ConcurrentConsumer(state, call, reports, retry)
    pq = modules["_process_queue"].ProcessQueue(("b", "T", 0), connection.address, "*")
    offset = 0
    for _ in range(rng.randint(1, 30)):
        pulled = [_message(rng, offset + n) for n in range(rng.randint(1, 40))]
        offset += len(pulled) + rng.randint(0, 3)
        pq.next_offset = offset
        fresh = pq.add(pulled)
        while fresh:
            size = rng.choice([1, 1, 2, 32])
            batch, fresh = fresh[:size], fresh[size:]
            await consumer.consume(pq, batch)
            if pq.unmarked:  # what OffsetStore.mark would take now
                pq.unmarked = False
                marked.append(pq.commit_offset())
    reports.flush()
    counters = state.counters
    totals = (counters.consumed, counters.failed, counters.broadcast_drops)
    held = (sorted(pq.messages), pq.held_bytes)
    return [seen, totals, retry.calls, held, marked, connection.sent]


def test_the_same_random_batches_are_consumed_the_same_way() -> None:
    pure, fast = _both()
    for seed in range(0, 400, 2):
        assert asyncio.run(_consume_run(pure, seed)) == asyncio.run(_consume_run(fast, seed)), (
            f"seed {seed}"
        )


def _process_queue_run(module: ModuleType, seed: int) -> list[Any]:
    rng = random.Random(seed)
    pq = module.ProcessQueue(("b", "T", 0), "a:1", "*")
    trace: list[Any] = [pq.commit_offset(), pq.span()]
    pulled = rng.randint(0, 5)
    for _ in range(300):
        choice = rng.random()
        if choice < 0.35:  # a pull, maybe overlapping what is held, maybe moved back
            start = pulled if rng.random() < 0.9 else max(0, pulled - rng.randint(1, 60))
            offsets = sorted(rng.sample(range(start, start + 48), rng.randint(1, 32)))
            added = pq.add([_message(rng, n) for n in offsets])
            trace.append([m.queue_offset for m in added])
            pulled = max(pulled, start + 48)
            pq.next_offset = pulled
        elif choice < 0.7 and pq.messages:
            done = rng.sample(sorted(pq.messages), rng.randint(1, len(pq.messages)))
            pq.remove([*done, rng.randint(0, pulled)])
        elif choice < 0.8 and pq.messages:
            held = rng.choice(sorted(pq.messages))
            pq.local_attempts[held] = rng.randint(1, 3)
            trace.append(_seen(pq.view(pq.messages[held])))
            trace.append(pq.view(pq.messages[held]).delivery_attempt)
        trace.append((pq.commit_offset(), pq.span(), sorted(pq.messages), pq.held_bytes))
    return trace


def test_the_same_random_pulls_and_finishes_give_the_same_commit_offsets() -> None:
    pure, fast = _both()
    for seed in range(100):
        pq_pure, pq_fast = pure["_process_queue"], fast["_process_queue"]
        assert _process_queue_run(pq_pure, seed) == _process_queue_run(pq_fast, seed), seed


async def _work_queue_run(module: ModuleType, seed: int) -> list[Any]:
    rng = random.Random(seed)
    bound = rng.randint(1, 8)
    queue = module.WorkQueue(bound)
    trace: list[Any] = []
    items = iter(range(10**6))
    for _ in range(200):
        choice = rng.random()
        if choice < 0.4 and len(queue) < bound:
            await queue.put_many([next(items) for _ in range(rng.randint(0, 5))])
        elif choice < 0.6:
            trace.append(queue.take())
        elif choice < 0.7 and len(queue):
            trace.append(await queue.get())
        elif choice < 0.8:
            try:
                queue.task_done()
            except ValueError as exc:
                trace.append(str(exc))
        elif choice < 0.9:  # a pull's answer handed on as it is read (client/consumer/pull.py)
            room = queue.has_room()
            trace.append(room)
            if room:
                queue.put_now([next(items) for _ in range(rng.randint(0, 5))])
        trace.append(len(queue))
    return trace


def test_the_same_random_puts_and_takes_give_the_same_work_queue() -> None:
    pure, fast = _both()
    for seed in range(200):
        assert asyncio.run(_work_queue_run(pure["_work"], seed)) == asyncio.run(
            _work_queue_run(fast["_work"], seed)
        ), seed


def test_the_twins_refuse_a_foreign_process_queue_as_typed() -> None:
    """What mypyc adds: a compiled function checks its declared argument types (docs/design.md
    "Compiled hot paths"); nothing in pocketmq passes anything else (mypy --strict)."""
    _, fast = _both()
    reports = fast["_reports"].OutcomeReports(detached_state(_Connection()))
    with pytest.raises(TypeError):
        reports.record(SimpleNamespace(address="b:1"), [], 0.0)
