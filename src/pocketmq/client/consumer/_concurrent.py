"""Concurrent consumption: ``concurrency`` workers call the listener with batches, in any order.

A batch's messages up to ``ConsumeContext.ack_index`` succeeded when the listener returns
SUCCESS; the rest failed (docs/semantics.md, "batch semantics"). Failures are handed back to the
broker (clustering) or logged and dropped (broadcasting never retries). Either way a message
leaves its process queue only once it is finished; the offset store takes the queue's new commit
offset when it persists (client/consumer/offsets.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pocketmq import properties as props
from pocketmq.client.consumer._consumption import Consumption
from pocketmq.client.consumer._process_queue import ProcessQueue
from pocketmq.client.consumer.config import ConsumeContext
from pocketmq.client.consumer.retry import FailedAttempt
from pocketmq.client.message import ConsumeStatus
from pocketmq.protocol import structs as w

__all__ = ["ConcurrentConsumer"]

log = logging.getLogger("pocketmq.client")

_SUCCESS = ConsumeStatus.SUCCESS  # an enum member looked up once, not per message


class ConcurrentConsumer(Consumption):
    """The workers of a concurrent push consumer."""

    async def worker(self) -> None:
        """Take batches off the work queue and consume them, until cancelled."""
        work = self._state.work
        assert work is not None
        me = asyncio.current_task()
        while True:
            # a batch already waiting is taken without a coroutine of its own
            item = work.take() or await work.get()
            pq, batch = item
            try:
                if not pq.dropped:
                    await self.consume(pq, batch, me)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consuming a batch failed unexpectedly")
            finally:
                work.task_done()

    async def consume(
        self,
        pq: ProcessQueue,
        batch: list[w.Delivered],
        task: asyncio.Task[Any] | None = None,
    ) -> None:
        """One listener call for ``batch`` (in ``task``, the worker's), then finish or hand back
        each message."""
        state = self._state
        counters = state.counters
        views = [pq.view(m) for m in batch]
        size = len(batch)
        listener = self._listener
        # a listener without a context argument cannot move the ack index or pick a delay:
        # no context is made for it (an interpreted dataclass __init__ per message, ~5 % of a
        # default consumer's CPU: docs/benchmarks.md, "The push consumer's client CPU per
        # message")
        context = ConsumeContext(size - 1, queue=pq.key) if listener.wants_context else None
        started = time.time()
        if listener.inline:  # a plain function that never blocks: no await round
            status, outcome, error = listener.call_inline(views, context)
        else:
            status, outcome, error = await listener(views, context, task)
        ack_index = size - 1 if context is None else context.ack_index
        cut = max(-1, min(ack_index, size - 1)) + 1 if status is _SUCCESS else 0
        if cut == size:  # the usual case: every message succeeded, nothing to slice
            succeeded, failed, reported = batch, batch[:0], views
        else:
            succeeded, failed, reported = batch[:cut], batch[cut:], views[:cut]
            if status is _SUCCESS:
                outcome, error = "RECONSUME_LATER", "after the ack index of a successful batch"
        counters.consumed += len(succeeded)
        counters.failed += len(failed)
        self._reports.record(pq, reported, started)
        finished = [m.queue_offset for m in succeeded]
        if failed:
            if not state.clustering:
                for message in failed:
                    log.warning(
                        "broadcast message %s failed and is dropped (broadcasting never retries)",
                        message.properties.get(props.MESSAGE_ID),
                    )
                counters.broadcast_drops += len(failed)
                finished += [m.queue_offset for m in failed]
            else:
                kept: list[w.Delivered] = []
                delay_level = 0 if context is None else context.delay_level
                for message in failed:
                    attempt = FailedAttempt(message, outcome, error, started)
                    if await self._retry.hand_back(pq, attempt, delay_level):
                        finished.append(message.queue_offset)
                    else:
                        kept.append(message)
                if kept:
                    self._retry.later(pq, kept)
        if pq.dropped:
            return
        pq.remove(finished)  # flags pq for the offset store's next persist
