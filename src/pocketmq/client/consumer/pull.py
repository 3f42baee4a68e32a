"""The pull loop of one owned queue: long polls that feed its process queue.

Each owned queue has one loop. It starts at the offset store's initial offset, asks the broker
for up to ``pull_batch`` messages, waiting up to ``long_poll`` seconds for new ones (the broker
answers as soon as one arrives), and hands what it got on: to the workers in batches of
``batch_size`` (concurrent consumers), or to the message groups' lanes (orderly consumers).
It stops pulling while ``max_cached_per_queue`` messages or ``max_cached_bytes_per_queue`` bytes
of bodies are in hand, so a slow listener bounds the memory it costs (a pull that brings the
queue over the byte bound is kept, as in RocketMQ: the next one waits), and while more than
``max_span`` offsets separate the first unfinished message from the next to pull, so one stuck
message bounds what a restart redelivers. A failed pull is tried again after a second; one that
cannot reach its broker asks for a rebalance, which fetches the route again (a slave may serve
the queue now).

A concurrent consumer's messages are handed to the workers as the pull's answer is read
(:class:`_HandOff`, called by the connection before the loop resumes), when the work queue has
room: an idle worker then calls the listener in the next loop turn, not one turn after the
loop's. The loop still does everything else — flow control, the next pull, waiting for room —
and the listener still runs in a worker, never in the connection's read or the pull loop
(docs/semantics.md, "where the listener runs").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pocketmq.client.consumer.hotpath import ProcessQueue, WorkQueue
from pocketmq.client.consumer.offsets import OffsetStore
from pocketmq.client.consumer.state import Batch, ConsumerState
from pocketmq.errors import BrokerConnectionError, PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["Puller"]

log = logging.getLogger("pocketmq.client")

Dispatch = Callable[[ProcessQueue, list[w.Delivered]], None]


class _HandOff:
    """A pull's messages handed to the workers in the loop turn that reads its answer (the
    connection's ``early`` call, ``ClientConnection.begin``): what the pull loop would do when
    it resumes a turn later, done only when that would not wait — the answer found messages,
    the queue is not dropped and the work queue has room (else the loop puts them as before,
    waiting for room). ``taken`` tells the loop the answer's messages are handed on already.
    One per pull loop, reused for each of its pulls (docs/benchmarks.md, "e2e latency: the
    woken consumer's turns (issue 32)")."""

    __slots__ = ("_pq", "_size", "_work", "taken")

    def __init__(self, pq: ProcessQueue, work: WorkQueue[Batch], size: int) -> None:
        self._pq = pq
        self._work = work
        self._size = size
        self.taken = False

    def __call__(self, reply: w.PullResponse) -> None:
        pq = self._pq
        if reply.status != "FOUND" or pq.dropped or not self._work.has_room():
            return
        fresh = pq.add(reply.messages)
        pq.next_offset = reply.next_offset
        self.taken = True
        self._work.put_now(pq.batches(fresh, self._size))


class Puller:
    """Runs pull loops; ``lanes`` (orderly consumers) takes new messages instead of the
    workers' queue."""

    def __init__(
        self, state: ConsumerState, offsets: OffsetStore, lanes: Dispatch | None = None
    ) -> None:
        self._state = state
        self._offsets = offsets
        self._lanes = lanes
        self.broker_lost: Callable[[], None] | None = None
        """Called when a pull cannot reach its broker: the route may have moved to a slave."""

    async def run(self, pq: ProcessQueue) -> None:
        """Pull ``pq`` until it is dropped (or the task is cancelled)."""
        state = self._state
        work = state.work
        assert work is not None
        _, topic, queue_id = pq.key
        config = state.config
        wait_ms = int(config.long_poll * 1000)
        pool = state.client.pool
        timeout = config.long_poll + state.client.client_config.request_timeout
        hand_off = _HandOff(pq, work, config.batch_size) if self._lanes is None else None
        while not pq.dropped:
            try:
                if pq.next_offset < 0:
                    pq.next_offset = await self._offsets.initial_offset(pq)
                if (
                    len(pq.messages) >= config.max_cached_per_queue
                    or pq.held_bytes >= config.max_cached_bytes_per_queue
                    or pq.span() > config.max_span
                ):
                    pq.space.clear()
                    await pq.space.wait()
                    continue
                connection = await pool.get(pq.address)
                if hand_off is not None:
                    hand_off.taken = False
                reply = await connection.request(
                    RequestCode.PULL,
                    w.PullRequest(
                        state.group,
                        topic,
                        queue_id,
                        pq.next_offset,
                        config.pull_batch,
                        pq.expression,
                        wait_ms,
                    ),
                    w.PullResponse,
                    timeout,
                    early=hand_off,
                )
            except asyncio.CancelledError:
                raise
            except PocketMQError as exc:
                log.warning("pull from %s %s/%d failed: %s", pq.address, topic, queue_id, exc)
                if isinstance(exc, BrokerConnectionError) and self.broker_lost is not None:
                    self.broker_lost()
                await asyncio.sleep(1.0)
                continue
            if pq.dropped:
                return
            if reply.status == "FOUND":
                if hand_off is not None and hand_off.taken:
                    continue  # handed to the workers as the answer was read
                fresh = pq.add(reply.messages)
                pq.next_offset = reply.next_offset
                if self._lanes is not None:
                    self._lanes(pq, fresh)
                    continue
                await work.put_many(pq.batches(fresh, config.batch_size))
            else:
                if reply.status == "OFFSET_ILLEGAL":
                    log.warning(
                        "offset %d of %s/%d is out of range; moving to %d",
                        pq.next_offset,
                        topic,
                        queue_id,
                        reply.next_offset,
                    )
                elif reply.status == "OFFSET_MOVED":
                    log.info(
                        "an operator moved %s/%d from %d to %d",
                        topic,
                        queue_id,
                        pq.next_offset,
                        reply.next_offset,
                    )
                pq.next_offset = reply.next_offset
                if not pq.messages:
                    self._offsets.mark(pq)
