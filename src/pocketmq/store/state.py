"""What one store's helpers share: its files, its queues, its lock, its clock and its failure.

:class:`~pocketmq.store.MessageStore` builds one :class:`StoreState` and hands it to the
:class:`~pocketmq.store.writer.Writer`, the :class:`~pocketmq.store.reader.Reader` and the
:class:`~pocketmq.store.replica.ReplicaWriter`, so none of them reaches back into the store
(and each can be exercised with a bare state). The rules for a failed store are
docs/storage-format.md §5.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pocketmq.store.commitlog import CommitLog
from pocketmq.store.config import StoreConfig
from pocketmq.store.consumequeue import ConsumeQueue
from pocketmq.store.diskguard import DiskGuard
from pocketmq.store.epochs import EpochLog
from pocketmq.store.index import IndexService
from pocketmq.store.openfiles import OpenFiles, default_capacity
from pocketmq.store.quarantine import Quarantine, QuarantinedRange
from pocketmq.store.recovery import set_aside

if TYPE_CHECKING:
    from pocketmq.store.flush import FlushService

__all__ = ["StoreState"]

log = logging.getLogger("pocketmq.store")


class StoreState:
    """The commit log, consume queues, index, quarantine, clock and failure of one store
    directory: owned here, shared by the store's writer, reader and replica writer."""

    def __init__(self, directory: str, config: StoreConfig, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.lock = threading.Lock()
        """Serialises appends, replica writes and everything that changes the queue map."""
        self.closed = False
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.files = OpenFiles(config.max_open_queue_files or default_capacity())
        self.commitlog = CommitLog(os.path.join(directory, "commitlog"), config.segment_size)
        self.index = IndexService(os.path.join(directory, "index"), config.index_max_entries)
        self.quarantine = Quarantine(os.path.join(directory, "quarantine"))
        self.disk_guard = DiskGuard(self.commitlog.directory, config.min_free_disk_bytes)
        """Refuses writes while the disk is (nearly) full (diskguard.py)."""
        self.epochs = EpochLog(directory)
        self.flusher: FlushService | None = None
        # an attribute, not a property: every append reads it (its frame was ~600 instructions)
        self.failure = ""
        """Why the store stopped accepting writes ("" while it accepts them); set by
        :meth:`fail` only."""

    def fail(self, what: str, exc: OSError) -> None:
        """An I/O error made the durability of written data unknown: accept no more writes
        (reads go on). A restart recovers from the log (docs/storage-format.md §5)."""
        if not self.failure:
            self.failure = f"{what} failed: {exc}"
            log.critical(
                "the store accepts no more writes: %s; restart the broker to recover from the "
                "log (data acknowledged before the error is checked again on start)",
                self.failure,
            )

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of ``topic``/``queue_id``, created (empty) on first use."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(
                os.path.join(self.directory, "consumequeue", topic, str(queue_id)),
                topic,
                queue_id,
                self.config.consume_queue_entries_per_file,
                self.files,
            )
            self.queues[(topic, queue_id)] = queue
        return queue

    def forget_queues(self, topic: str) -> None:
        """Destroy the topic's queues: a tombstone ended it, and the queues so far are not the
        next incarnation's (docs/storage-format.md §1)."""
        for key in [k for k in self.queues if k[0] == topic]:
            self.queues.pop(key).destroy()

    def quarantine_span(self, start: int, end: int, kind: str, reason: str) -> QuarantinedRange:
        """Set the log bytes ``start``..``end`` aside as ``kind`` (docs/storage-format.md §7)."""
        return set_aside(
            self.commitlog,
            self.queues,
            self.quarantine,
            start,
            end,
            kind,
            reason,
            int(self.clock() * 1000),
        )
