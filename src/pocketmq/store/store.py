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
from dataclasses import dataclass

import msgspec

from pocketmq.errors import StoreCorruptedError
from pocketmq.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from pocketmq.store.commitlog import CommitLog, Segment
from pocketmq.store.config import FlushMode, RecoveryMode, StoreConfig
from pocketmq.store.consumequeue import ENTRY, ConsumeQueue
from pocketmq.store.files import fsync_directory
from pocketmq.store.flush import FlushService
from pocketmq.store.index import IndexService, id_key, topic_key
from pocketmq.store.message import (
    GetResult,
    PutResult,
    QueueEntry,
    StoredMessage,
    StoreMessage,
)
from pocketmq.store.record import (
    FIXED_HEADER_SIZE,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    RecordError,
    compute_tag_code,
    decode_record,
    encode_properties,
    encode_record_fast,
    pack_host,
    topic_block,
    valid_topic,
)
from pocketmq.store.status import GetStatus, PutStatus

__all__ = ["MessageStore", "RetentionReport", "StoreStatistics"]

log = logging.getLogger("pocketmq.store")

_MAX_COALESCED_READ = 1024 * 1024
_RECORD_OVERHEAD = FIXED_HEADER_SIZE + 8  # header and two u32 lengths (topic block apart)
_MAX_QUEUE_ID = 2**31 - 1


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
        self._commitlog = CommitLog(os.path.join(directory, "commitlog"), config.segment_size)
        self._index = IndexService(os.path.join(directory, "index"), config.index_max_entries)
        self._checkpoint_path = os.path.join(directory, "checkpoint")
        self._abort_path = os.path.join(directory, "abort")
        self._append_started = 0.0
        self._free_checked_at = -1.0
        self._disk_full = False
        self._messages_put = 0
        self._bytes_put = 0
        self._put_failures = 0
        self._truncated_bytes = 0
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
        lock_fd = os.open(os.path.join(directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(lock_fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise RuntimeError(f"{directory} is in use by another pocketmq process") from exc
            raise
        try:
            store = cls(directory, config or StoreConfig(), clock)
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
        clean = self._flusher is None or self._flusher.failed is None
        if clean:
            self.sync_log(self._commitlog.write_position)
            self.write_checkpoint()
        for queue in self._queues.values():
            queue.close()
        self._index.close()
        self._commitlog.close()
        if clean:
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
        checkpoint = read_checkpoint(self._checkpoint_path)
        commitlog = self._commitlog
        first = commitlog.min_offset
        if checkpoint is None:
            start = flushed = first
            trusted_counts: dict[str, int] = {}
        else:
            flushed = max(checkpoint.commitlog_flushed, first)
            start = max(min(checkpoint.dispatched, checkpoint.commitlog_flushed), first)
            trusted_counts = checkpoint.queues
        self._load_queues()

        # 1. verify the log from the start of the checkpoint's segment on (records before the
        #    checkpoint were confirmed durable: damage there is an error, not a torn tail);
        #    truncate a torn tail before any write is accepted
        verify_from = max(first, start - start % commitlog.segment_size)
        for _ in commitlog.scan(verify_from):
            pass
        end, error = commitlog.scan_end, commitlog.scan_error
        if end < flushed and not error:
            error = "the log ends before the checkpoint (a file was truncated or lost)"

        if error and end < flushed:
            where = commitlog.segment_for(end)
            if self.config.recovery is RecoveryMode.STRICT:
                raise StoreCorruptedError(
                    f"a record confirmed durable fails verification ({error}); open with "
                    "recovery='truncate' to drop it and everything after it",
                    path=where.path if where else commitlog.directory,
                    offset=end,
                )
            log.error("truncating the commit log at %d, below the checkpoint (%d)", end, flushed)
        if unclean or error:
            extent = self._written_extent()
            if extent > end:
                self._truncated_bytes = extent - end
                log.warning(
                    "commit log: dropped %d bytes after offset %d (%s)",
                    self._truncated_bytes,
                    end,
                    error or "torn tail",
                )
        commitlog.truncate(end)
        commitlog.flushed_position = min(flushed, end)

        # 2. consume queues: drop entries past the end, detect damaged or missing queues
        rebuild = checkpoint is None and end > first
        for (topic, queue_id), queue in self._queues.items():
            if not queue.recover(end, trusted_counts.get(f"{topic}/{queue_id}")):
                log.warning("consume queue %s/%d is behind its checkpoint", topic, queue_id)
                rebuild = True
        for key, count in trusted_counts.items():
            topic, _, queue_text = key.rpartition("/")
            if count and (topic, int(queue_text)) not in self._queues:
                log.warning("consume queue %s is missing", key)
                rebuild = True
        if rebuild:
            for queue in self._queues.values():
                queue.reset()

        # 3. index: a missing index is rebuilt; after a crash the newest file is not trusted
        index_from: int | None = None
        if not self._index.files:
            index_from = first
        elif unclean:
            index_from = self._index.drop_last_for_rebuild()

        # 4. replay what the queues and the index are missing (idempotent)
        queue_from = first if rebuild else start
        replay_from = min(queue_from, index_from if index_from is not None else queue_from)
        replayed = 0
        for record in commitlog.scan(replay_from):
            physical = record.physical_offset
            if physical >= queue_from:
                self._queue(record.topic, record.queue_id).put_one(
                    record.queue_offset, physical, record.size, record.tag_code
                )
            if index_from is not None and physical >= index_from:
                props = record.properties
                self._index_record(
                    record.topic, props.get(PROP_UNIQ_KEY, ""), props.get(PROP_KEYS, ""), physical
                )
            replayed += 1
        for queue in self._queues.values():
            queue.set_min_physical(first)
        commitlog.write_position = end
        self._start_flusher(commitlog.flushed_position)
        if replayed:
            log.info("recovery replayed %d records from offset %d", replayed, replay_from)

    def _written_extent(self) -> int:
        """The offset just past the last non-zero byte of the last segment (approximate)."""
        segments = self._commitlog.segments
        if not segments:
            return 0
        last = segments[-1]
        size = min(os.fstat(last.fd).st_size, last.size)
        step = 1 << 20
        position = size
        while position > 0:
            chunk_start = max(0, position - step)
            chunk = last.read(chunk_start, position - chunk_start)
            stripped = len(chunk.rstrip(b"\x00"))
            if stripped:
                return last.base + chunk_start + stripped
            position = chunk_start
        return last.base

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
                    )

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(
                os.path.join(self.directory, "consumequeue", topic, str(queue_id)),
                topic,
                queue_id,
                self.config.consume_queue_entries_per_file,
            )
            self._queues[(topic, queue_id)] = queue
        return queue

    def _index_record(self, topic: str, message_id: str, keys: str, physical_offset: int) -> None:
        index = self._index
        if message_id:
            index.put(id_key(message_id), physical_offset)
        if keys:
            for key in keys.split():
                index.put(topic_key(topic, key), physical_offset)

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
        self._commitlog.sync_to(target)

    def write_checkpoint(self) -> None:
        with self._lock:
            position = self._commitlog.write_position
            counts = {f"{t}/{q}": queue.max_offset for (t, q), queue in self._queues.items()}
            queue_fds = [fd for queue in self._queues.values() for fd in queue.take_dirty()]
            index_files = list(self._index.files[-2:])
        self._commitlog.sync_to(position)
        for fd in queue_fds:
            with contextlib.suppress(OSError):  # the queue may have been deleted since
                os.fdatasync(fd)
        for index_file in index_files:
            with contextlib.suppress(ValueError):  # retention may have closed it since
                index_file.flush()
        write_checkpoint(
            self._checkpoint_path,
            Checkpoint(
                commitlog_flushed=self._commitlog.flushed_position,
                dispatched=position,
                queues=counts,
                written_at_ms=int(self._clock() * 1000),
            ),
        )

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
            try:
                return self._append_locked(messages)
            finally:
                self._append_started = 0.0

    def _refusal(self) -> PutStatus | None:
        if self._closed:
            return PutStatus.SERVICE_NOT_AVAILABLE
        if self._flusher is not None and self._flusher.failed is not None:
            return PutStatus.UNKNOWN_ERROR
        now = time.monotonic()
        if now - self._free_checked_at >= 1.0 or self._disk_full:
            self._free_checked_at = now
            try:
                stats = os.statvfs(self._commitlog.directory)
                free = stats.f_bavail * stats.f_frsize
                self._disk_full = free < self.config.min_free_disk_bytes
            except OSError:
                self._disk_full = False
        return PutStatus.DISK_FULL if self._disk_full else None

    def _append_locked(self, messages: Sequence[StoreMessage]) -> list[PutResult]:
        refusal = self._refusal()
        if refusal is not None:
            self._put_failures += len(messages)
            return [PutResult(status=refusal, reason=refusal.value.lower())] * len(messages)
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

        for number, message in enumerate(messages):
            topic = message.topic
            problem = self._validate(message)
            if problem is not None:
                results[number] = problem
                continue
            props = message.properties
            encoded_props = encode_properties(props)
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
            queue_id = message.queue_id
            key = (topic, queue_id)
            queue_offset = next_offsets.get(key)
            if queue_offset is None:
                queue_offset = self._queue(topic, queue_id).max_offset
            next_offsets[key] = queue_offset + 1
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
            self._dispatch(written, now_ms, results)
        flusher = self._flusher
        if flusher is not None and position - flusher.flushed >= config.flush_dirty_bytes:
            flusher.kick()
        return results  # type: ignore[return-value]  # every slot is filled above

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
            number,
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
            results[number] = PutResult(
                PutStatus.PUT_OK, topic, queue_id, queue_offset, physical, size, now_ms
            )
            bytes_put += size
        self._messages_put += len(written)
        self._bytes_put += bytes_put
        for key, entries in by_queue.items():
            self._queues[key].put(first_offsets[key], b"".join(entries))
        if index_entries:
            self._index.put_many(index_entries)

    def _validate(self, message: StoreMessage) -> PutResult | None:
        topic = message.topic
        if topic not in self._valid_topics:
            if not valid_topic(topic):
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
        return None

    def _status_for(self, exc: OSError) -> PutStatus:
        return (
            PutStatus.DISK_FULL
            if exc.errno in (errno.ENOSPC, errno.EDQUOT)
            else PutStatus.UNKNOWN_ERROR
        )

    def _note_write_error(self, exc: OSError) -> None:
        self._put_failures += 1
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            self._disk_full = True
            self._free_checked_at = time.monotonic()
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
        return [
            msgspec.structs.replace(r, status=PutStatus.FLUSH_DISK_TIMEOUT)
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
                if codes is not None and code not in codes:
                    continue
                batch.append((cursor - 1, physical, size))
                if len(messages) + len(batch) >= max_count or size_total + size > max_bytes:
                    break
            for record in self._read_records(batch):
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

    def _read_records(self, batch: list[tuple[int, int, int]]) -> list[StoredMessage]:
        """Read records, coalescing physically adjacent ones into one read."""
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
                for _, physical, _ in batch[i:j]:
                    try:
                        out.append(
                            decode_record(data, physical - start, expected_physical_offset=physical)
                        )
                    except RecordError as exc:
                        segment = commitlog.segment_for(physical)
                        raise StoreCorruptedError(
                            f"record fails verification on read ({exc.reason})",
                            path=segment.path if segment else commitlog.directory,
                            offset=physical,
                        ) from exc
            i = j
        return out

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

    def delete_topic(self, topic: str) -> None:
        """Forget the topic's consume queues (its records age out of the log with retention)."""
        with self._lock:
            for key in [k for k in self._queues if k[0] == topic]:
                self._queues.pop(key).destroy()
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.directory, "consumequeue", topic))

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
            recovered_truncated_bytes=self._truncated_bytes,
            flush_mode=self.config.flush_mode.value,
        )

    @property
    def busy(self) -> bool:
        """Whether an append has been running longer than ``busy_timeout`` (flow control)."""
        started = self._append_started
        return bool(started) and time.monotonic() - started > self.config.busy_timeout
