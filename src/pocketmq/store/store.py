"""The message store: append, read, look up, flush, recover, retain.

One object owns a data directory (``LOCK`` keeps a second process out). Appends are serialised by
one lock and written with a single ``pwrite`` per batch and segment; consume-queue entries and
index keys are dispatched inline, so a message is readable the moment ``append`` returns.
Durability is the flusher's job (see ``flush.py``). Recovery runs in ``open`` before any write is
accepted (docs/storage-format.md §6).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from pocketmq.names import TOMBSTONE_TOPIC, is_storable_topic
from pocketmq.store import faults
from pocketmq.store.checkpoint import (
    Checkpoint,
    FlushMarker,
    read_checkpoint,
    read_flush_marker,
    write_checkpoint,
)
from pocketmq.store.config import FlushMode, StoreConfig
from pocketmq.store.consumequeue import ConsumeQueue
from pocketmq.store.files import (
    PRIVATE_FILE,
    SyncError,
    fdatasync,
    fsync_directory,
    make_private_directories,
)
from pocketmq.store.flush import FlushService
from pocketmq.store.message import (
    PutResult,
    StoreMessage,
)
from pocketmq.store.quarantine import QuarantinedRange
from pocketmq.store.reader import Reader
from pocketmq.store.recovery import Recovery, RecoveryReport
from pocketmq.store.replica import ReplicaError, ReplicaWriter
from pocketmq.store.state import StoreState
from pocketmq.store.status import PutStatus, RetentionReport, StoreStatistics
from pocketmq.store.writer import Writer

__all__ = ["MessageStore", "RetentionReport", "StoreStatistics"]  # the last two: status.py

log = logging.getLogger("pocketmq.store")

_MAX_QUEUE_ID = 2**31 - 1
_MAX_RESERVE_GAP = 1_000_000  # never write more holes than this for one queue (20 MB of entries)


class MessageStore:
    """A durable, append-only message store. Open it with :meth:`open`."""

    def __init__(self, directory: str, config: StoreConfig, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.config = config
        self._state = state = StoreState(directory, config, clock)
        self._clock = clock
        self._lock = state.lock
        self._lock_fd = -1
        self._queues = state.queues
        self._files = state.files
        self._commitlog = state.commitlog
        self._index = state.index
        self._quarantine = state.quarantine
        self._checkpoint_path = os.path.join(directory, "checkpoint")
        self._marker = FlushMarker(os.path.join(directory, "flushed"))
        self._abort_path = os.path.join(directory, "abort")
        self.recovery_report = RecoveryReport()
        self._append_started = 0.0
        self._replica_of = ""
        self.disk_guard = state.disk_guard
        """Refuses writes while the disk is (nearly) full (diskguard.py)."""
        self.epochs = state.epochs
        self._writer = Writer(state)
        self._replica = ReplicaWriter(state)
        self._reader = reader = Reader(state)
        self.read_queue = reader.read_queue
        self.read_message = reader.read_message
        self.get_messages = reader.get_messages
        self.query_by_id = reader.query_by_id
        self.query_by_key = reader.query_by_key

    @property
    def replica_of(self) -> str:
        """Set while this store is a slave's copy (the group's name): local appends are refused,
        only :meth:`append_replica` writes, so the log never diverges from the master's."""
        return self._replica_of

    @replica_of.setter
    def replica_of(self, master: str) -> None:
        with self._lock:
            if master:  # a slave's log is cut and copied again below what it appended itself
                self._reader.forget_appended()
            self._replica_of = master

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has begun (appends are refused from then on)."""
        return self._state.closed

    @property
    def flusher(self) -> FlushService | None:
        """The background fsync service (None until recovery has run)."""
        return self._state.flusher

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        config: StoreConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> MessageStore:
        """Open (creating if needed) the store in ``directory``, recovering it first."""
        make_private_directories(directory)  # docs/security.md, "Files"
        config = config or StoreConfig()
        if config.fault_file:
            faults.install(faults.FaultInjector(path=config.fault_file))
        lock_fd = os.open(os.path.join(directory, "LOCK"), os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(lock_fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise RuntimeError(f"{directory} is in use by another pocketmq process") from exc
            raise
        try:
            store = cls(directory, config, clock)
            store._lock_fd = lock_fd
            store._recover()
        except BaseException:
            os.close(lock_fd)
            raise
        return store

    def close(self) -> None:
        """Flush everything, write the checkpoint and release the directory."""
        with self._lock:
            if self._state.closed:
                return
            self._state.closed = True
            self._reader.forget_appended()
        if self.flusher is not None:
            self.flusher.stop()
        if not self._state.failure:
            try:
                self.sync_log(self._commitlog.write_position)
                self.write_checkpoint()
            except OSError as exc:
                log.error("closing the store: %s (the next start recovers from the log)", exc)
        try:
            for queue in self._queues.values():
                queue.close()
            self._files.close_all()
            self._index.close()
        except OSError as exc:
            self.fail("closing the index", exc)
        self._commitlog.close()
        self._marker.close()
        if not (self._state.failure or self._writer.index_broken):  # else the next start recovers
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._abort_path)
        os.close(self._lock_fd)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- recovery -------------------------------------------------------------------------

    def _recover(self) -> None:
        unclean = os.path.exists(self._abort_path)
        os.close(os.open(self._abort_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE))
        self._load_queues()
        recovery = Recovery(
            commitlog=self._commitlog,
            queues=self._queues,
            make_queue=self._state.queue,
            index=self._index,
            quarantine=self._quarantine,
            mode=self.config.recovery,
            clock=self._clock,
        )
        self.recovery_report = recovery.run(
            read_checkpoint(self._checkpoint_path),
            read_flush_marker(self._marker.path),
            unclean=unclean,
        )
        self._start_flusher(self._commitlog.flushed_position)

    def _load_queues(self) -> None:
        root = os.path.join(self.directory, "consumequeue")
        if not os.path.isdir(root):
            return
        for topic in os.listdir(root):
            topic_dir = os.path.join(root, topic)
            for name in os.listdir(topic_dir):
                if name.isdigit():
                    queue_id = int(name)
                    self._queues[(topic, queue_id)] = ConsumeQueue(
                        os.path.join(topic_dir, name),
                        topic,
                        queue_id,
                        self.config.consume_queue_entries_per_file,
                        self._files,
                    )

    def _start_flusher(self, flushed: int) -> None:
        self._state.flusher = flusher = FlushService(
            self,
            flushed=flushed,
            interval=self.config.flush_interval,
            checkpoint_interval=self.config.checkpoint_interval,
            sync_mode=self.config.flush_mode is FlushMode.SYNC,
        )
        flusher.start()

    # -- FlushTarget ----------------------------------------------------------------------

    def written_position(self) -> int:
        """How far the commit log is written (the flusher's target)."""
        return self._commitlog.write_position

    def sync_log(self, target: int) -> None:
        """Fsync the log up to ``target`` and record it in the flush marker; a failure stops the
        store accepting writes (docs/storage-format.md §5)."""
        try:
            self._commitlog.sync_to(target)
        except OSError as exc:
            self.fail("fsync of the commit log", exc)
            raise
        self._marker.write(self._commitlog.flushed_position)

    def write_checkpoint(self) -> None:
        """Make the log, the queues and the index durable up to now, then record it.

        Any failed fsync stops the store accepting writes (raises): a checkpoint must never
        claim durability a failed fsync may have lost.
        """
        if self._state.failure:
            raise OSError(errno.EIO, f"the store failed earlier ({self._state.failure})")
        with self._lock:
            position = self._commitlog.write_position
            counts = {f"{t}/{q}": queue.max_offset for (t, q), queue in self._queues.items()}
            dirty = self._files.take_dirty()
            index_files = list(self._index.files[-2:])
        try:
            self.sync_log(position)
            for queue_file in dirty:
                if queue_file.fd >= 0:
                    fdatasync(queue_file.fd, "consumequeue")
            for index_file in index_files:
                with contextlib.suppress(ValueError):  # retention may have closed it since
                    index_file.flush()
        except SyncError as exc:
            self.fail("an fsync before the checkpoint", exc)
            raise
        finally:
            self._files.release_all(dirty)
        try:
            write_checkpoint(
                self._checkpoint_path,
                Checkpoint(
                    commitlog_flushed=self._commitlog.flushed_position,
                    dispatched=position,
                    queues=counts,
                    written_at_ms=int(self._clock() * 1000),
                ),
            )
        except SyncError as exc:
            self.fail("the checkpoint's fsync", exc)
            raise

    def fail(self, what: str, exc: OSError) -> None:
        """An I/O error made the durability of written data unknown: accept no more writes
        (reads go on). A restart recovers from the log (docs/storage-format.md §5)."""
        self._state.fail(what, exc)

    @property
    def write_position(self) -> int:
        """Where the next record goes (the end of the log)."""
        return self._commitlog.write_position

    @property
    def flushed_position(self) -> int:
        """Everything below it is fsynced."""
        flusher = self.flusher
        return flusher.flushed if flusher is not None else self._commitlog.flushed_position

    @property
    def min_physical_offset(self) -> int:
        """The oldest log offset still stored (retention deletes whole segments)."""
        return self._commitlog.min_offset

    @property
    def failure(self) -> str:
        """Why the store stopped accepting writes ("" while it accepts them)."""
        return self._state.failure

    # -- writes ---------------------------------------------------------------------------

    def append(self, messages: Sequence[StoreMessage]) -> list[PutResult]:
        """Write ``messages`` to the log (page cache) and dispatch them; never waits for fsync.

        The results line up with ``messages``. In sync-flush mode call :meth:`when_durable`
        with the end of the last stored result before acknowledging. The batch is kept as
        given, for the pulls its append wakes (``Reader.appended``): a message's properties
        must not change once appended.
        """
        if self._replica_of:
            reason = f"this store is a replica of {self.replica_of}: only its master writes"
            return [PutResult(status=PutStatus.SERVICE_NOT_AVAILABLE, reason=reason)] * len(
                messages
            )
        if (
            self._append_started
            and time.monotonic() - self._append_started > self.config.busy_timeout
        ):
            return [PutResult(status=PutStatus.OS_PAGE_CACHE_BUSY, reason="store busy")] * len(
                messages
            )
        with self._lock:
            self._append_started = time.monotonic()
            try:
                results = self._writer.append(messages)
            finally:
                self._append_started = 0.0
            # kept for the pulls its append wakes (``Reader.appended``), looked at by them
            self._reader.appends.append(
                (messages if isinstance(messages, tuple) else tuple(messages), results)
            )
            return results

    def when_durable(self, offset: int, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once everything below ``offset`` is fsynced (group commit)."""
        assert self.flusher is not None
        self.flusher.when_durable(offset, callback)

    def put(self, messages: Sequence[StoreMessage]) -> list[PutResult]:
        """Append and, in sync-flush mode, block until durable (thread-safe).

        A flush that outlasts ``sync_flush_timeout`` turns ``PUT_OK`` into ``FLUSH_DISK_TIMEOUT``.
        """
        results = self.append(messages)
        if self.config.flush_mode is not FlushMode.SYNC:
            return results
        end = max((r.physical_offset + r.size for r in results if r.status.stored), default=0)
        if not end:
            return results
        done = threading.Event()
        outcome: list[bool] = []

        def finished(ok: bool) -> None:
            outcome.append(ok)
            done.set()

        self.when_durable(end, finished)
        if done.wait(self.config.sync_flush_timeout) and outcome[0]:
            return results
        return self.not_durable(results)

    def not_durable(self, results: list[PutResult]) -> list[PutResult]:
        """``results`` of an append whose sync flush did not succeed: ``FLUSH_DISK_TIMEOUT``
        (written, durable later) while the store is healthy, ``STORE_FAILED`` (may be lost)
        after an fsync failed."""
        status, reason = PutStatus.FLUSH_DISK_TIMEOUT, "stored, but not flushed to disk in time"
        if self._state.failure:
            status, reason = PutStatus.STORE_FAILED, self._state.failure
        return [
            msgspec.structs.replace(r, status=status, reason=reason)
            if r.status is PutStatus.PUT_OK
            else r
            for r in results
        ]

    @property
    def flush_mode(self) -> FlushMode:
        """Whether appends are acknowledged before or after an fsync, for the broker's durability
        waits."""
        return self.config.flush_mode

    def flush(self) -> None:
        """fsync everything written so far and write the checkpoint (blocking)."""
        self.write_checkpoint()

    # -- reads ----------------------------------------------------------------------------

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next offset to be written in a queue (0 for a queue never written)."""
        queue = self._queues.get((topic, queue_id))
        return queue.max_offset if queue else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The oldest offset still readable in a queue (retention moves it)."""
        queue = self._queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    # -- replication (docs/replication.md) -------------------------------------------------

    def append_replica(
        self, offset: int, data: bytes, written: Callable[[int], None] | None = None
    ) -> int:
        """A slave: write raw log bytes from the master at ``offset``, verified first; returns
        the new end of the log (raises :class:`~pocketmq.store.replica.ReplicaError`).
        ``written(end)``: called when the bytes are in the log, before they are dispatched."""
        with self._lock:
            self._reader.forget_appended()  # none where ``replica_of`` is set, as on a slave
            return self._replica.append(offset, data, written)

    def cut_replica(self, offset: int, reason: str) -> QuarantinedRange | None:
        """A slave: drop the log from ``offset`` on (bytes its new master never had)."""
        with self._lock:
            self._reader.forget_appended()
            return self._replica.cut(offset, reason)

    @property
    def replica(self) -> ReplicaWriter:
        """A slave's holes and what it copies again (docs/replication.md §4)."""
        return self._replica

    def start_replica_at(self, offset: int) -> None:
        """An empty slave whose master's log begins at ``offset`` (older segments were removed
        by retention) begins its own log there."""
        with self._lock:
            commitlog = self._commitlog
            if commitlog.segments or commitlog.write_position:
                raise ReplicaError("only an empty store can begin its log elsewhere")
            if offset % self.config.segment_size:
                raise ReplicaError(f"{offset} is not the start of a segment")
            commitlog.write_position = commitlog.flushed_position = offset

    def read_log(self, offset: int, max_bytes: int) -> bytes:
        """Raw log bytes from ``offset`` (a record boundary) for a slave: whole records of one
        segment, up to ``max_bytes`` unless one record is larger; the rest of a segment (its
        blank) when nothing else is left in it; b"" when the log has nothing more."""
        return self._commitlog.read_chunk(offset, max_bytes)

    def set_visible_limit(self, limit: int | None) -> None:
        """Readers get only records that end at or below ``limit`` (None: all). A replicated
        master's confirmed offset: what a failover could discard is never delivered."""
        self._reader.visible_limit = limit

    # -- administration -------------------------------------------------------------------

    def delete_topic(self, topic: str) -> PutResult:
        """End the topic: a tombstone record in the log (so a rebuild from the log does not
        bring its messages back, docs/storage-format.md §1), then its queues are deleted. The
        records themselves age out with retention. Returns the tombstone's result; nothing is
        deleted when it could not be written."""
        with self._lock:
            [result] = self._writer.append(
                [StoreMessage(topic=TOMBSTONE_TOPIC, queue_id=0, body=topic.encode())]
            )
            if not result.status.stored:
                return result
            self._reader.forget_appended()
            self._state.forget_queues(topic)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.directory, "consumequeue", topic))
        return result

    def reserve_queue_offset(self, topic: str, queue_id: int, next_offset: int) -> int:
        """Make sure the next message of this queue gets an offset of at least ``next_offset``.

        The broker calls it at start-up with the positions consumers have already committed:
        after a crash that lost a queue's tail, new messages must not reuse offsets consumers
        moved past (they would never see them). Returns the number of holes written.
        """
        if not is_storable_topic(topic) or not 0 <= queue_id <= _MAX_QUEUE_ID:
            return 0
        with self._lock:
            queue = self._state.queue(topic, queue_id)
            gap = next_offset - queue.max_offset
            if gap <= 0:
                return 0
            self._reader.forget_appended()  # the queue's last entry is a hole from now on
            if gap > _MAX_RESERVE_GAP:
                log.warning(
                    "not reserving %d offsets of %s/%d (above %d): the committed offset %d is "
                    "implausible",
                    gap,
                    topic,
                    queue_id,
                    _MAX_RESERVE_GAP,
                    next_offset,
                )
                return 0
            written = queue.reserve(next_offset, self._commitlog.write_position)
        log.warning(
            "queue %s/%d: offsets up to %d were consumed before a crash lost them; new messages "
            "start at %d",
            topic,
            queue_id,
            next_offset,
            next_offset,
        )
        return written

    def quarantined(self) -> list[QuarantinedRange]:
        """Every range of the log set aside as damaged (docs/storage-format.md §7)."""
        return list(self._quarantine.ranges)

    def run_maintenance(self, now: float | None = None) -> RetentionReport:
        """Delete expired or excess segments and what points only into them."""
        now = self._clock() if now is None else now
        commitlog = self._commitlog
        commitlog.close_retired()
        flushed = commitlog.flushed_position
        expire_before = now - self.config.retention_hours * 3600
        deleted = 0
        with self._lock:
            segments = commitlog.segments
            doomed = 0
            total = len(segments) * commitlog.segment_size
            for segment in segments[:-1]:
                if segment.base + segment.size > flushed:
                    break
                too_old = os.fstat(segment.fd).st_mtime < expire_before
                too_big = (
                    self.config.max_store_bytes is not None and total > self.config.max_store_bytes
                )
                if not (too_old or too_big):
                    break
                doomed += 1
                total -= commitlog.segment_size
            if doomed:
                self._reader.forget_appended()
                deleted = len(commitlog.delete_oldest(doomed, flushed))
                fsync_directory(commitlog.directory)
                low = commitlog.min_offset
                for queue in self._queues.values():
                    queue.set_min_physical(low)
                self._index.delete_below(low)
        if deleted:
            log.info("retention deleted %d commit-log segments", deleted)
        return RetentionReport(segments_deleted=deleted, min_physical_offset=commitlog.min_offset)

    def statistics(self) -> StoreStatistics:
        """A frozen snapshot of the store's counters and positions, for the broker's status and the
        benchmarks."""
        flusher = self.flusher
        return StoreStatistics(
            messages_put=self._writer.messages_put,
            bytes_put=self._writer.bytes_put,
            put_failures=self._writer.put_failures,
            write_position=self._commitlog.write_position,
            flushed_position=flusher.flushed if flusher else self._commitlog.flushed_position,
            min_physical_offset=self._commitlog.min_offset,
            segments=len(self._commitlog.segments),
            queues=len(self._queues),
            fsyncs=flusher.fsync_count if flusher else 0,
            fsync_seconds=flusher.fsync_seconds if flusher else 0.0,
            recovered_truncated_bytes=self.recovery_report.truncated_bytes,
            flush_mode=self.config.flush_mode.value,
            quarantined_ranges=len(self._quarantine.ranges),
            damaged_records_read=self._reader.damaged_reads,
            open_queue_files=len(self._files),
            failure=self._state.failure,
            refusing_writes=self.disk_guard.refusal(),
            disk_free_bytes=self.disk_guard.free_bytes,
        )

    @property
    def busy(self) -> bool:
        """Whether an append has been running longer than ``busy_timeout`` (flow control)."""
        started = self._append_started
        return bool(started) and time.monotonic() - started > self.config.busy_timeout
