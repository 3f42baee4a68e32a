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
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from pocketmq.store import faults
from pocketmq.store.checkpoint import (
    Checkpoint,
    FlushMarker,
    read_checkpoint,
    read_flush_marker,
    write_checkpoint,
)
from pocketmq.store.commitlog import CommitLog, Segment
from pocketmq.store.config import FlushMode, StoreConfig
from pocketmq.store.consumequeue import ENTRY, ConsumeQueue
from pocketmq.store.files import SyncError, fdatasync, fsync_directory
from pocketmq.store.flush import FlushService
from pocketmq.store.index import IndexService, id_key, topic_key
from pocketmq.store.message import (
    GetResult,
    PutResult,
    QueueEntry,
    StoredMessage,
    StoreMessage,
)
from pocketmq.store.openfiles import OpenFiles, QueueFile, default_capacity
from pocketmq.store.quarantine import LostEntry, Quarantine, QuarantinedRange
from pocketmq.store.record import (
    FIXED_HEADER_SIZE,
    MAGIC,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    TOMBSTONE_TOPIC,
    RecordError,
    compute_tag_code,
    decode_record,
    encode_properties,
    encode_record_fast,
    pack_host,
    topic_block,
    valid_topic,
)
from pocketmq.store.recovery import Recovery, RecoveryReport
from pocketmq.store.status import GetStatus, PutStatus

__all__ = ["MessageStore", "RetentionReport", "StoreStatistics"]

log = logging.getLogger("pocketmq.store")

_MAX_COALESCED_READ = 1024 * 1024
_RECORD_OVERHEAD = FIXED_HEADER_SIZE + 8  # header and two u32 lengths (topic block apart)
_MAX_QUEUE_ID = 2**31 - 1
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_MAX_RESERVE_GAP = 1_000_000  # never write more holes than this for one queue (20 MB of entries)
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_MAX_REPAIR_SCAN = 64 * 1024 * 1024  # how much log a damaged queue entry's repair may read
_MAX_NEIGHBOUR_SEARCH = 4096  # entries looked at for the nearest valid neighbour
# total size, magic, crc, flags, queue id, queue offset, physical offset
_HEAD = struct.Struct("<IIIIIQQ")
_decode_properties = msgspec.msgpack.Decoder(dict[str, str]).decode


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreStatistics:
    """A snapshot of the store's counters."""

    messages_put: int
    bytes_put: int
    put_failures: int
    write_position: int
    flushed_position: int
    min_physical_offset: int
    segments: int
    queues: int
    fsyncs: int
    fsync_seconds: float
    recovered_truncated_bytes: int
    flush_mode: str
    quarantined_ranges: int
    damaged_records_read: int
    open_queue_files: int
    failure: str
    """Why the store stopped accepting writes ("" while it accepts them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetentionReport:
    segments_deleted: int
    min_physical_offset: int


# (result slot, topic, queue id, queue offset, physical offset, size, tag code, id, keys)
_Written = tuple[int, str, int, int, int, int, int, str, str]


class MessageStore:
    """A durable, append-only message store. Open it with :meth:`open`."""

    def __init__(self, directory: str, config: StoreConfig, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._lock_fd = -1
        self._store_host = pack_host(config.store_host)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._valid_topics: set[str] = set()
        self._files = OpenFiles(config.max_open_queue_files or default_capacity())
        self._commitlog = CommitLog(os.path.join(directory, "commitlog"), config.segment_size)
        self._index = IndexService(os.path.join(directory, "index"), config.index_max_entries)
        self._quarantine = Quarantine(os.path.join(directory, "quarantine"))
        self._checkpoint_path = os.path.join(directory, "checkpoint")
        self._marker = FlushMarker(os.path.join(directory, "flushed"))
        self._abort_path = os.path.join(directory, "abort")
        self._failure = ""
        self._index_broken = ""
        self._damaged_reads = 0
        self.recovery_report = RecoveryReport()
        self._append_started = 0.0
        self._free_checked_at = -1.0
        self._disk_full = False
        self._messages_put = 0
        self._bytes_put = 0
        self._put_failures = 0
        self._flusher: FlushService | None = None

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
        os.makedirs(directory, exist_ok=True)
        config = config or StoreConfig()
        if config.fault_file:
            faults.install(faults.FaultInjector(path=config.fault_file))
        lock_fd = os.open(os.path.join(directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
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
            if self._closed:
                return
            self._closed = True
        if self._flusher is not None:
            self._flusher.stop()
        if not self._failure:
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
        if not (self._failure or self._index_broken):  # else the next start recovers
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
        with open(self._abort_path, "wb"):
            pass
        self._load_queues()
        recovery = Recovery(
            commitlog=self._commitlog,
            queues=self._queues,
            make_queue=self._queue,
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

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(
                os.path.join(self.directory, "consumequeue", topic, str(queue_id)),
                topic,
                queue_id,
                self.config.consume_queue_entries_per_file,
                self._files,
            )
            self._queues[(topic, queue_id)] = queue
        return queue

    def _start_flusher(self, flushed: int) -> None:
        self._flusher = FlushService(
            self,
            flushed=flushed,
            interval=self.config.flush_interval,
            checkpoint_interval=self.config.checkpoint_interval,
            sync_mode=self.config.flush_mode is FlushMode.SYNC,
        )
        self._flusher.start()

    # -- FlushTarget ----------------------------------------------------------------------

    def written_position(self) -> int:
        return self._commitlog.write_position

    def sync_log(self, target: int) -> None:
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
        if self._failure:
            raise OSError(errno.EIO, f"the store failed earlier ({self._failure})")
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
        if not self._failure:
            self._failure = f"{what} failed: {exc}"
            log.critical(
                "the store accepts no more writes: %s; restart the broker to recover from the "
                "log (data acknowledged before the error is checked again on start)",
                self._failure,
            )

    @property
    def failure(self) -> str:
        """Why the store stopped accepting writes ("" while it accepts them)."""
        return self._failure

    # -- writes ---------------------------------------------------------------------------

    def append(self, messages: Sequence[StoreMessage]) -> list[PutResult]:
        """Write ``messages`` to the log (page cache) and dispatch them; never waits for fsync.

        The results line up with ``messages``. In sync-flush mode call :meth:`when_durable`
        with the end of the last stored result before acknowledging.
        """
        if (
            self._append_started
            and time.monotonic() - self._append_started > self.config.busy_timeout
        ):
            return [PutResult(status=PutStatus.OS_PAGE_CACHE_BUSY, reason="store busy")] * len(
                messages
            )
        with self._lock:
            self._append_started = time.monotonic()
            pinned: list[tuple[ConsumeQueue, QueueFile]] = []
            try:
                return self._append_locked(messages, pinned)
            finally:
                for queue, queue_file in pinned:
                    queue.unpin(queue_file)
                self._append_started = 0.0

    def _refusal(self) -> tuple[PutStatus, str] | None:
        if self._closed:
            return PutStatus.SERVICE_NOT_AVAILABLE, "the store is closed"
        if self._failure:
            return PutStatus.STORE_FAILED, self._failure
        now = time.monotonic()
        if now - self._free_checked_at >= 1.0 or self._disk_full:
            self._free_checked_at = now
            try:
                stats = os.statvfs(self._commitlog.directory)
                free = stats.f_bavail * stats.f_frsize
                self._disk_full = free < self.config.min_free_disk_bytes
            except OSError:
                self._disk_full = False
        if self._disk_full:
            return PutStatus.DISK_FULL, "the disk is (nearly) full"
        return None

    def _append_locked(
        self,
        messages: Sequence[StoreMessage],
        pinned: list[tuple[ConsumeQueue, QueueFile]],
    ) -> list[PutResult]:
        """Append under the lock. Every queue file the batch will write is opened (and pinned
        in ``pinned`` until the caller releases it) before its message is logged."""
        refusal = self._refusal()
        if refusal is not None:
            self._put_failures += len(messages)
            return [PutResult(status=refusal[0], reason=refusal[1])] * len(messages)
        config = self.config
        max_props = config.max_properties_size
        now_ms = int(self._clock() * 1000)
        store_host = self._store_host
        commitlog = self._commitlog
        results: list[PutResult | None] = [None] * len(messages)
        # (result slot, topic, queue id, queue offset, physical offset, size, tag code, id, keys)
        written: list[_Written] = []
        pending: list[_Written] = []  # encoded into ``pieces``, not yet written
        pieces: list[bytes] = []
        segment_failure, segment_reason = PutStatus.UNKNOWN_ERROR, ""
        try:
            segment: Segment | None = commitlog.active_segment()
        except OSError as exc:
            return self._fail_all(messages, exc)
        assert segment is not None
        segment_end = segment.base + segment.size
        position = chunk_start = commitlog.write_position
        next_offsets: dict[tuple[str, int], int] = {}
        per_file = config.consume_queue_entries_per_file

        for number, message in enumerate(messages):
            topic = message.topic
            problem = self._validate(message)
            if problem is not None:
                results[number] = problem
                continue
            props = message.properties
            try:
                encoded_props = encode_properties(props)
                _decode_properties(encoded_props)  # strings only: the record must decode later
            except (TypeError, ValueError, UnicodeError, msgspec.ValidationError) as exc:
                results[number] = PutResult(
                    status=PutStatus.MESSAGE_ILLEGAL, reason=f"properties cannot be stored: {exc}"
                )
                continue
            if len(encoded_props) > max_props:
                results[number] = PutResult(
                    status=PutStatus.PROPERTIES_TOO_LARGE,
                    reason=f"properties are {len(encoded_props)} bytes, limit {max_props}",
                )
                continue
            body = message.body
            size = _RECORD_OVERHEAD + len(topic_block(topic)) + len(encoded_props) + len(body)
            if size > config.segment_size:
                results[number] = PutResult(
                    status=PutStatus.MESSAGE_TOO_LARGE,
                    reason=f"record of {size} bytes does not fit a "
                    f"{config.segment_size}-byte segment",
                )
                continue
            # the queue position first: a queue file that cannot be created refuses the
            # message before it is in the log (a logged record is always dispatched)
            queue_id = message.queue_id
            key = (topic, queue_id)
            queue_offset = next_offsets.get(key)
            if queue_offset is None or queue_offset % per_file == 0:
                queue = self._queue(topic, queue_id)
                if queue_offset is None:
                    queue_offset = queue.max_offset
                try:
                    pinned.append((queue, queue.prepare(queue_offset)))
                except OSError as exc:
                    results[number] = self._queue_file_refusal(exc)
                    continue
            if segment is None:
                results[number] = PutResult(status=segment_failure, reason=segment_reason)
                continue
            if position + size > segment_end:
                # finish this segment: write what is pending, seal it, open the next one
                try:
                    self._write_pieces(segment, chunk_start, pieces)
                    written.extend(pending)
                except OSError as exc:
                    self._fail_pending(pending, results, exc)
                    position = chunk_start
                    segment = None
                    segment_failure, segment_reason = self._status_for(exc), str(exc)
                    results[number] = PutResult(status=segment_failure, reason=segment_reason)
                    continue
                finally:
                    pieces.clear()
                    pending.clear()
                commitlog.write_position = position
                try:
                    commitlog.seal(segment)
                    segment = commitlog.active_segment()
                except OSError as exc:
                    self._note_write_error(exc)
                    segment = None
                    position = chunk_start = commitlog.write_position
                    segment_failure = self._status_for(exc)
                    segment_reason = f"cannot allocate a commit-log segment: {exc}"
                    results[number] = PutResult(status=segment_failure, reason=segment_reason)
                    continue
                segment_end = segment.base + segment.size
                position = chunk_start = commitlog.write_position
            code = message.tag_code
            if code is None:
                code = compute_tag_code(props.get(PROP_TAGS))
            prefix, meta = encode_record_fast(
                topic_block(topic),
                encoded_props,
                body,
                message.flags,
                queue_id,
                queue_offset,
                position,
                message.born_timestamp,
                now_ms,
                message.born_host or store_host,
                store_host,
                message.reconsume_times,
                message.prepared_transaction_offset,
                code,
                size,
            )
            next_offsets[key] = queue_offset + 1
            pieces += (prefix, meta, body)
            pending.append(
                (
                    number,
                    topic,
                    queue_id,
                    queue_offset,
                    position,
                    size,
                    code,
                    props.get(PROP_UNIQ_KEY, ""),
                    props.get(PROP_KEYS, ""),
                )
            )
            position += size
        if segment is not None and pending:
            try:
                self._write_pieces(segment, chunk_start, pieces)
                written.extend(pending)
            except OSError as exc:
                self._fail_pending(pending, results, exc)
                position = chunk_start
        commitlog.write_position = position
        if written:
            try:
                self._dispatch(written, now_ms, results)
            except OSError as exc:
                # The records are in the log but their queue entries are not: recovery must
                # dispatch them, so no further write may be accepted before a restart.
                self.fail("writing consume-queue or index entries", exc)
                for item in written:
                    results[item[0]] = PutResult(
                        status=PutStatus.STORE_FAILED, reason=self._failure
                    )
        flusher = self._flusher
        if flusher is not None and position - flusher.flushed >= config.flush_dirty_bytes:
            flusher.kick()
        return results  # type: ignore[return-value]  # every slot is filled above

    def _queue_file_refusal(self, exc: OSError) -> PutResult:
        """The answer for a message whose consume-queue file could not be made ready."""
        self._put_failures += 1
        if isinstance(exc, SyncError):
            self.fail("an fsync of a consume-queue file", exc)
            return PutResult(status=PutStatus.STORE_FAILED, reason=self._failure)
        if exc.errno in _OUT_OF_DESCRIPTORS:
            log.error("cannot open a consume-queue file: %s", exc)
            return PutResult(
                status=PutStatus.OUT_OF_RESOURCES,
                reason=f"the broker has no file descriptor left ({exc}); nothing was stored",
            )
        status = self._status_for(exc)
        log.error("cannot create a consume-queue file: %s", exc)
        return PutResult(status=status, reason=f"cannot create a consume-queue file: {exc}")

    @staticmethod
    def _write_pieces(segment: Segment, start: int, pieces: list[bytes]) -> None:
        if pieces:
            segment.write(start - segment.base, b"".join(pieces))

    def _dispatch(
        self, written: list[_Written], now_ms: int, results: list[PutResult | None]
    ) -> None:
        by_queue: dict[tuple[str, int], list[bytes]] = {}
        first_offsets: dict[tuple[str, int], int] = {}
        index_entries: list[tuple[bytes, int]] = []
        pack_entry = ENTRY.pack
        bytes_put = 0
        for (
            _number,
            topic,
            queue_id,
            queue_offset,
            physical,
            size,
            code,
            message_id,
            keys,
        ) in written:
            key = (topic, queue_id)
            entries = by_queue.get(key)
            if entries is None:
                entries = by_queue[key] = []
                first_offsets[key] = queue_offset
            entries.append(pack_entry(physical, size, code))
            if message_id:
                index_entries.append((id_key(message_id), physical))
            if keys:
                index_entries.extend((topic_key(topic, k), physical) for k in keys.split())
            bytes_put += size
        for key, entries in by_queue.items():
            self._queues[key].put(first_offsets[key], b"".join(entries), pinned=True)
        if index_entries and not self._index_broken:
            try:
                self._index.put_many(index_entries)
            except OSError as exc:
                # The index is derived from the log: stop indexing and re-index on the next
                # start (the abort file stays), instead of refusing messages.
                self._index_broken = f"{exc}"
                log.error("the index stops until the next start, which rebuilds it: %s", exc)
        for number, topic, queue_id, queue_offset, physical, size, *_ in written:
            results[number] = PutResult(
                PutStatus.PUT_OK, topic, queue_id, queue_offset, physical, size, now_ms
            )
        self._messages_put += len(written)
        self._bytes_put += bytes_put

    def _validate(self, message: StoreMessage) -> PutResult | None:
        """Check every field before anything of the batch is written (a record that fails to
        encode half-way through a batch must not leave the others with reused offsets)."""
        topic = message.topic
        if topic not in self._valid_topics:
            if not isinstance(topic, str) or not valid_topic(topic):
                return PutResult(
                    status=PutStatus.MESSAGE_ILLEGAL,
                    reason=f"topic {topic!r} must be 1-127 characters of [A-Za-z0-9_%|-]",
                )
            if len(self._valid_topics) < 100_000:
                self._valid_topics.add(topic)
        if not 0 <= message.queue_id <= _MAX_QUEUE_ID:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, reason="queue id out of range")
        if not isinstance(message.body, bytes):
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, reason="body must be bytes")
        if len(message.body) > self.config.max_message_size:
            return PutResult(
                status=PutStatus.MESSAGE_TOO_LARGE,
                reason=f"body is {len(message.body)} bytes, limit {self.config.max_message_size}",
            )
        problem = ""
        if not 0 <= message.flags <= _U32_MAX:
            problem = f"flags {message.flags} out of range 0..2^32-1"
        elif not 0 <= message.born_timestamp <= _U64_MAX:
            problem = f"born timestamp {message.born_timestamp} out of range 0..2^64-1"
        elif not 0 <= message.reconsume_times <= _U32_MAX:
            problem = f"reconsume count {message.reconsume_times} out of range 0..2^32-1"
        elif not 0 <= message.prepared_transaction_offset <= _U64_MAX:
            problem = "prepared transaction offset out of range 0..2^64-1"
        elif message.tag_code is not None and not 0 <= message.tag_code <= _U64_MAX:
            problem = "tag code out of range 0..2^64-1"
        elif len(message.born_host) not in (0, 18):
            problem = "born host must be empty or 18 packed bytes"
        if problem:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, reason=problem)
        return None

    def _status_for(self, exc: OSError) -> PutStatus:
        if self._failure:
            return PutStatus.STORE_FAILED
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return PutStatus.DISK_FULL
        if exc.errno in _OUT_OF_DESCRIPTORS:
            return PutStatus.OUT_OF_RESOURCES
        return PutStatus.UNKNOWN_ERROR

    def _note_write_error(self, exc: OSError) -> None:
        self._put_failures += 1
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            self._disk_full = True
            self._free_checked_at = time.monotonic()
        elif isinstance(exc, SyncError) or exc.errno == errno.EIO:
            self.fail("a commit-log write", exc)
        log.error("commit log write failed: %s", exc)

    def _fail_pending(
        self,
        pending: list[_Written],
        results: list[PutResult | None],
        exc: OSError,
    ) -> None:
        self._note_write_error(exc)
        status = self._status_for(exc)
        for item in pending:
            results[item[0]] = PutResult(status=status, reason=str(exc))
        pending.clear()

    def _fail_all(self, messages: Sequence[StoreMessage], exc: OSError) -> list[PutResult]:
        self._note_write_error(exc)
        status = self._status_for(exc)
        self._put_failures += len(messages)
        return [PutResult(status=status, reason=str(exc))] * len(messages)

    def when_durable(self, offset: int, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once everything below ``offset`` is fsynced (group commit)."""
        assert self._flusher is not None
        self._flusher.when_durable(offset, callback)

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
        if self._failure:
            status, reason = PutStatus.STORE_FAILED, self._failure
        return [
            msgspec.structs.replace(r, status=status, reason=reason)
            if r.status is PutStatus.PUT_OK
            else r
            for r in results
        ]

    @property
    def flush_mode(self) -> FlushMode:
        return self.config.flush_mode

    def flush(self) -> None:
        """fsync everything written so far and write the checkpoint (blocking)."""
        self.write_checkpoint()

    # -- reads ----------------------------------------------------------------------------

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.max_offset if queue else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self._queues if t == topic)

    def read_queue(self, topic: str, queue_id: int, offset: int, count: int) -> list[QueueEntry]:
        """Consume-queue entries (no record reads) from ``offset``."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return []
        return queue.read(max(offset, queue.min_offset), count)

    def read_message(self, physical_offset: int) -> StoredMessage | None:
        """The record at ``physical_offset`` (what send-back looks up), verified, or None."""
        if physical_offset < self._commitlog.min_offset:
            return None
        return self._commitlog.read_record(physical_offset)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        max_bytes: int = 4 * 1024 * 1024,
        tags: frozenset[str] | None = None,
        max_scan: int = 1024,
    ) -> GetResult:
        """Read up to ``max_count`` messages of a queue from logical ``offset``.

        ``tags`` keeps only messages with one of these tags (None: all). At most ``max_scan``
        entries are examined, so a sparse filter returns ``NO_MATCHED_MESSAGE`` with a
        ``next_offset`` past the skipped entries instead of scanning forever.
        """
        queue = self._queues.get((topic, queue_id))
        if queue is None or queue.max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], low, low, high)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, low, high)
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], high, low, high)
        codes = {compute_tag_code(t) for t in tags} if tags is not None else None
        log_min = self._commitlog.min_offset
        quarantine = self._quarantine if self._quarantine.skipping else None
        messages: list[StoredMessage] = []
        size_total = 0
        cursor = offset
        scanned = 0
        removed = False
        while cursor < high and len(messages) < max_count and scanned < max_scan:
            raw = queue.read_raw(cursor, min(max_scan - scanned, max(max_count * 2, 64)))
            if not raw:
                break
            batch: list[tuple[int, int, int]] = []
            for physical, size, code in ENTRY.iter_unpack(raw):
                cursor += 1
                scanned += 1
                if physical < log_min or size == 0:
                    removed = True
                    continue
                if quarantine is not None and quarantine.covering(physical) is not None:
                    removed = True  # set aside as damaged: consumers move past it
                    continue
                if codes is not None and code not in codes:
                    continue
                batch.append((cursor - 1, physical, size))
                if len(messages) + len(batch) >= max_count or size_total + size > max_bytes:
                    break
            records = self._read_records(batch, topic, queue_id)
            if len(records) < len(batch):
                removed = True
            for record in records:
                if tags is not None and record.tag not in tags:
                    continue
                if messages and size_total + record.size > max_bytes:
                    cursor = record.queue_offset
                    break
                messages.append(record)
                size_total += record.size
            if size_total >= max_bytes:
                break
        if messages:
            status = GetStatus.FOUND
        elif removed:
            status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, cursor, low, high)

    def _read_records(
        self, batch: list[tuple[int, int, int]], topic: str, queue_id: int
    ) -> list[StoredMessage]:
        """Read records, coalescing physically adjacent ones into one read; a record that
        fails verification is set aside (and left out) rather than failing the read."""
        out: list[StoredMessage] = []
        i = 0
        commitlog = self._commitlog
        while i < len(batch):
            _, start, size = batch[i]
            end = start + size
            j = i + 1
            segment_end = start - start % commitlog.segment_size + commitlog.segment_size
            while j < len(batch) and batch[j][1] == end and end - start < _MAX_COALESCED_READ:
                if batch[j][1] + batch[j][2] > segment_end:
                    break
                end += batch[j][2]
                j += 1
            data = commitlog.read(start, end - start)
            if data is not None:
                for queue_offset, physical, entry_size in batch[i:j]:
                    try:
                        out.append(
                            decode_record(data, physical - start, expected_physical_offset=physical)
                        )
                    except RecordError as exc:
                        repaired = self._unreadable_entry(
                            topic, queue_id, queue_offset, physical, entry_size, exc.reason
                        )
                        if repaired is not None:
                            out.append(repaired)
            i = j
        return out

    def _unreadable_entry(
        self, topic: str, queue_id: int, queue_offset: int, physical: int, size: int, reason: str
    ) -> StoredMessage | None:
        """A queue entry did not lead to a valid record (docs/storage-format.md §7).

        If the record's own header agrees with the entry, the record is damaged: set it aside
        and let consumers move past it. Otherwise the entry itself is damaged: find the real
        record between the entry's neighbours in the log and repair the entry (a hole when the
        record is gone). The quarantine never takes a range on the word of a damaged entry.
        """
        self._damaged_reads += 1
        head = self._commitlog.read(physical, _HEAD.size)
        if head is not None:
            total, magic, _, _, _, _, own = _HEAD.unpack(head)
            if magic == MAGIC and total == size and own == physical:
                self._set_aside_on_read(topic, queue_id, queue_offset, physical, size, reason)
                return None
        queue = self._queues[(topic, queue_id)]
        found = self._find_record(queue, queue_offset)
        if found is not None:
            queue.put_one(queue_offset, found.physical_offset, found.size, found.tag_code)
            log.warning(
                "consume queue %s/%d entry %d pointed at %d (%s); repaired from the log (%d)",
                topic,
                queue_id,
                queue_offset,
                physical,
                reason,
                found.physical_offset,
            )
            return found
        before = self._neighbour(queue, queue_offset, -1)
        hole_at = before[0] + before[1] if before else self._commitlog.min_offset
        queue.put_holes([queue_offset], hole_at)
        log.error(
            "consume queue %s/%d entry %d pointed at %d (%s) and its record is not in the log; "
            "consumers move past it",
            topic,
            queue_id,
            queue_offset,
            physical,
            reason,
        )
        return None

    def _neighbour(self, queue: ConsumeQueue, offset: int, step: int) -> tuple[int, int] | None:
        """The nearest entry before (step -1) or after (+1) ``offset`` that names a record."""
        for _ in range(_MAX_NEIGHBOUR_SEARCH):
            offset += step
            if not queue.min_offset <= offset < queue.max_offset:
                return None
            entry = queue.entry(offset)
            if entry is not None and entry.size:
                return entry.physical_offset, entry.size
        return None

    def _find_record(self, queue: ConsumeQueue, queue_offset: int) -> StoredMessage | None:
        """The record of ``queue_offset`` in the log, between its neighbours' records."""
        before = self._neighbour(queue, queue_offset, -1)
        after = self._neighbour(queue, queue_offset, +1)
        start = before[0] + before[1] if before else self._commitlog.min_offset
        stop = after[0] if after else self._commitlog.write_position
        if not 0 <= stop - start <= _MAX_REPAIR_SCAN:
            return None
        wanted = (queue.topic, queue.queue_id, queue_offset)
        for record in self._commitlog.scan(start, skip=self._quarantine):
            if record.physical_offset >= stop:
                break
            if (record.topic, record.queue_id, record.queue_offset) == wanted:
                return record
        return None

    def _set_aside_on_read(
        self, topic: str, queue_id: int, queue_offset: int, physical: int, size: int, reason: str
    ) -> None:
        """A record below the recovery's verification point is damaged (docs/storage-format.md
        §7): quarantine it, say so once, and let its consumers move past it."""
        if self._quarantine.covering(physical) is not None:
            return
        segment = self._commitlog.segment_for(physical)
        item = QuarantinedRange(
            start=physical,
            end=physical + size,
            kind="damaged",
            reason=f"{reason} (found on read)",
            detected_at_ms=int(self._clock() * 1000),
            lost=[LostEntry(topic, queue_id, queue_offset)],
        )
        try:
            item = self._quarantine.add(item, self._commitlog.read(physical, size) or b"")
        except OSError as exc:
            log.error("cannot save the damaged record to the quarantine: %s", exc)
            self._quarantine.remember(item)
        log.error(
            "record of %s/%d at queue offset %d (%s, offset %d) fails verification (%s); it is "
            "set aside in %s and its consumers move past it",
            topic,
            queue_id,
            queue_offset,
            segment.path if segment else self._commitlog.directory,
            physical,
            reason,
            self._quarantine.directory,
        )

    def query_by_id(self, message_id: str, limit: int = 32) -> list[StoredMessage]:
        """Records whose message id is ``message_id`` (several if a retry stored it twice)."""
        found = [r for r in self._lookup(id_key(message_id), limit) if r.message_id == message_id]
        return found[:limit]

    def query_by_key(self, topic: str, key: str, limit: int = 32) -> list[StoredMessage]:
        found = [
            record
            for record in self._lookup(topic_key(topic, key), limit)
            if record.topic == topic and key in record.keys
        ]
        return found[:limit]

    def _lookup(self, key: bytes, limit: int) -> list[StoredMessage]:
        records: list[StoredMessage] = []
        for physical in self._index.lookup(key, limit * 2):
            record = self.read_message(physical)
            if record is not None:
                records.append(record)
        return records

    # -- administration -------------------------------------------------------------------

    def delete_topic(self, topic: str) -> PutResult:
        """End the topic: a tombstone record in the log (so a rebuild from the log does not
        bring its messages back, docs/storage-format.md §1), then its queues are deleted. The
        records themselves age out with retention. Returns the tombstone's result; nothing is
        deleted when it could not be written."""
        with self._lock:
            pinned: list[tuple[ConsumeQueue, QueueFile]] = []
            try:
                [result] = self._append_locked(
                    [StoreMessage(topic=TOMBSTONE_TOPIC, queue_id=0, body=topic.encode())], pinned
                )
            finally:
                for queue, queue_file in pinned:
                    queue.unpin(queue_file)
            if not result.status.stored:
                return result
            for key in [k for k in self._queues if k[0] == topic]:
                self._queues.pop(key).destroy()
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.directory, "consumequeue", topic))
        return result

    def reserve_queue_offset(self, topic: str, queue_id: int, next_offset: int) -> int:
        """Make sure the next message of this queue gets an offset of at least ``next_offset``.

        The broker calls it at start-up with the positions consumers have already committed:
        after a crash that lost a queue's tail, new messages must not reuse offsets consumers
        moved past (they would never see them). Returns the number of holes written.
        """
        if not valid_topic(topic) or not 0 <= queue_id <= _MAX_QUEUE_ID:
            return 0
        with self._lock:
            queue = self._queue(topic, queue_id)
            gap = next_offset - queue.max_offset
            if gap <= 0:
                return 0
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
        flusher = self._flusher
        return StoreStatistics(
            messages_put=self._messages_put,
            bytes_put=self._bytes_put,
            put_failures=self._put_failures,
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
            damaged_records_read=self._damaged_reads,
            open_queue_files=len(self._files),
            failure=self._failure,
        )

    @property
    def busy(self) -> bool:
        """Whether an append has been running longer than ``busy_timeout`` (flow control)."""
        started = self._append_started
        return bool(started) and time.monotonic() - started > self.config.busy_timeout
