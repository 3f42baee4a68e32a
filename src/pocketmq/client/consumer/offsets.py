"""Where a push consumer's progress lives: on the brokers (clustering) or in a file
(broadcasting, where every consumer has its own progress).

Both stores keep the latest commit offset of each owned queue in memory (:meth:`mark`) and write
what changed on :meth:`persist`: every 5 s, when a queue is dropped in a rebalance, and on close.
Finishing messages only flags their process queue (``ProcessQueue.unmarked``); :meth:`persist`
takes the flagged queues' commit offsets first, so a default consumer no longer calls into this
(pure Python) module once per message, which cost a tenth of its CPU (docs/benchmarks.md, "The
push consumer's client CPU per message"). A crash re-delivers what was consumed since the
last persist — at-least-once (docs/semantics.md, "Topics, groups, offsets").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pocketmq.client.consumer.config import QueueKey
from pocketmq.client.consumer.state import ConsumerState
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

if TYPE_CHECKING:  # the per-message path imports this module: no import cycle at run time
    from pocketmq.client.consumer._process_queue import ProcessQueue

__all__ = ["BrokerOffsetStore", "LocalOffsetStore", "OffsetStore", "offset_store_for"]

log = logging.getLogger("pocketmq.client")


class OffsetStore:
    """The progress of each owned queue: what to commit, and where to start."""

    def __init__(self, state: ConsumerState) -> None:
        self._state = state
        self.offsets: dict[QueueKey, int] = {}
        self._dirty: set[QueueKey] = set()

    def load(self) -> None:
        """Read stored progress before the first queue is taken (a no-op for the brokers')."""

    def mark(self, pq: ProcessQueue) -> None:
        """Remember ``pq``'s commit offset, to be written by the next :meth:`persist`."""
        pq.unmarked = False
        offset = pq.commit_offset()
        if offset >= 0 and self.offsets.get(pq.key) != offset:
            self.offsets[pq.key] = offset
            self._dirty.add(pq.key)

    async def initial_offset(self, pq: ProcessQueue) -> int:
        """Where to start pulling a newly owned queue: the group's committed offset, or where
        the group's ``consume_from`` says for a group that has none (the broker decides)."""
        state = self._state
        _broker, topic, queue_id = pq.key
        reply = await state.call(
            pq.address,
            RequestCode.QUERY_OFFSET,
            w.QueryOffsetRequest(state.group, topic, queue_id),
            w.QueryOffsetResponse,
        )
        return reply.offset

    def _take_dirty(self, only: set[QueueKey] | None) -> set[QueueKey]:
        """The queues whose offsets changed (of ``only``), after marking the owned queues
        that finished messages since their last mark."""
        for pq in self._state.queues.values():
            if pq.unmarked:
                self.mark(pq)
        return {k for k in self._dirty if only is None or k in only}

    async def persist(self, only: set[QueueKey] | None = None) -> None:
        """Write the offsets that changed (of the queues in ``only``, if given)."""
        raise NotImplementedError


class BrokerOffsetStore(OffsetStore):
    """Clustering: offsets are committed to the broker holding each queue."""

    async def persist(self, only: set[QueueKey] | None = None) -> None:
        """Commit the changed offsets, one request per broker; a broker that fails keeps its
        offsets dirty for the next round.
        """
        keys = self._take_dirty(only)
        if not keys:
            return
        state = self._state
        by_address: dict[str, list[w.OffsetEntry]] = {}
        addresses = {pq.key[0]: pq.address for pq in state.queues.values()}
        for key in keys:
            broker, topic, queue_id = key
            address = addresses.get(broker)
            if address is None:  # a dropped queue: its broker's address is in the route
                with contextlib.suppress(PocketMQError):
                    route = await state.client.routes.get(topic)
                    address = route.addresses.get(broker)
            if address is None:
                continue
            by_address.setdefault(address, []).append(
                w.OffsetEntry(topic, queue_id, self.offsets[key])
            )
        for address, entries in by_address.items():
            try:
                await state.call(
                    address,
                    RequestCode.COMMIT_OFFSET,
                    w.CommitOffsetRequest(state.group, entries),
                    w.Empty,
                )
                self._dirty -= {k for k in keys if addresses.get(k[0], address) == address}
            except PocketMQError as exc:
                log.warning("committing offsets to %s failed: %s", address, exc)


class LocalOffsetStore(OffsetStore):
    """Broadcasting: offsets live in a JSON file under ``offset_store_dir``
    (``~/.pocketmq/offsets`` by default), one file per group and host."""

    def __init__(self, state: ConsumerState, path: Path) -> None:
        super().__init__(state)
        self.path = path

    def load(self) -> None:
        """Read the file; a missing or unreadable file means no progress yet."""
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        for key, offset in raw.items():
            broker, topic, queue = key.rsplit("@", 2)
            self.offsets[(broker, topic, int(queue))] = int(offset)

    async def initial_offset(self, pq: ProcessQueue) -> int:
        """The offset in the file, else the broker's answer."""
        if pq.key in self.offsets:
            return self.offsets[pq.key]
        return await super().initial_offset(pq)

    async def persist(self, only: set[QueueKey] | None = None) -> None:
        """Rewrite the whole file atomically (temporary file, then rename)."""
        keys = self._take_dirty(only)
        if not keys:
            return
        self._dirty -= keys
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({f"{b}@{t}@{q}": o for (b, t, q), o in self.offsets.items()}))
        os.replace(tmp, self.path)


def offset_store_for(state: ConsumerState) -> OffsetStore:
    """The offset store the consumer's message model needs."""
    if state.clustering:
        return BrokerOffsetStore(state)
    config = state.config
    root = config.offset_store_dir or os.path.join(Path.home(), ".pocketmq", "offsets")
    safe_id = state.client.client_config.client_id.replace("@", "_").replace("/", "_")
    return LocalOffsetStore(state, Path(root) / f"{state.group}.{safe_id.split('_')[0]}.json")
