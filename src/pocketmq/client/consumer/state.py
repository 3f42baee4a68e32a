"""What the parts of one push consumer share: its queues, its counters, its work queue.

A push consumer is several cooperating parts (membership, rebalance, pull loops, workers,
orderly lanes, retry hand-back, offset store); each is a small object that gets this shared
state instead of reaching into the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from pocketmq.client.base import ClientBase
from pocketmq.client.consumer.config import MessageModel, PushConsumerConfig, QueueKey
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

if TYPE_CHECKING:  # the per-message path imports this module: no import cycle at run time
    from pocketmq.client.consumer._process_queue import ProcessQueue
    from pocketmq.client.consumer._work import WorkQueue

__all__ = ["Batch", "ConsumerCounters", "ConsumerState"]

T = TypeVar("T")

Batch = tuple["ProcessQueue", list[w.Delivered]]
"""Messages of one process queue for one listener call."""


@dataclass(slots=True)
class ConsumerCounters:
    """The running counts behind :class:`~pocketmq.client.ConsumerStatistics`."""

    consumed: int = 0
    failed: int = 0
    sent_back: int = 0
    resent: int = 0
    local_retries: int = 0
    broadcast_drops: int = 0
    dead_lettered: int = 0


class ConsumerState:
    """The consumer's connections and settings, its owned queues and its shared counters."""

    def __init__(self, client: ClientBase, group: str, config: PushConsumerConfig) -> None:
        self.client = client
        self.group = group
        self.config = config
        self.clustering = config.model is MessageModel.CLUSTERING
        self.queues: dict[QueueKey, ProcessQueue] = {}
        self.counters = ConsumerCounters()
        self.work: WorkQueue[Batch] | None = None
        """Batches for the workers; created at start."""
        self.started = False
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def client_id(self) -> str:
        """This consumer's id, as the broker knows it among the group's members."""
        return self.client.pool.client_id

    async def call(
        self, address: str, code: RequestCode, body: msgspec.Struct, reply: type[T]
    ) -> T:
        """One request to ``address`` with the client's request timeout."""
        connection = await self.client.pool.get(address)
        timeout = self.client.client_config.request_timeout
        return await connection.request(code, body, reply, timeout)

    async def call_any(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        """One request to the first configured server that answers (cluster-wide facts)."""
        return await self.client._call_any(code, body, reply)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` in the background until it ends or the consumer closes."""
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def background(self) -> list[asyncio.Task[Any]]:
        """The background tasks still running (a closing consumer cancels them)."""
        return list(self._background)
