"""The append path: a batch of messages into the commit log, their queue entries and index keys.

Every message is checked field by field and its queue file made ready (created, opened, pinned)
before anything of it is written, so a message is either refused with a status or logged and
dispatched: a record in the log is always dispatched, and a queue offset always names one record
(docs/storage-format.md §1-§2). One ``pwrite`` per batch and segment; one per queue for the
entries. An I/O error after the log write stops the store accepting writes (§5).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from pocketmq.names import is_storable_topic
from pocketmq.store.commitlog import Segment
from pocketmq.store.consumequeue import ENTRY, GROW_MAX, ConsumeQueue
from pocketmq.store.files import SyncError
from pocketmq.store.index import id_key, topic_key
from pocketmq.store.lograte import LogRate
from pocketmq.store.message import (
    PutResult,
    StoreMessage,
)
from pocketmq.store.openfiles import QueueFile
from pocketmq.store.record import (
    FIXED_HEADER_SIZE,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    compute_tag_code,
    encode_properties,
    encode_record_fast,
    pack_host,
    topic_block,
)
from pocketmq.store.status import PutStatus

if TYPE_CHECKING:
    from pocketmq.store.store import MessageStore

__all__ = ["Writer"]

log = logging.getLogger("pocketmq.store")

_RECORD_OVERHEAD = FIXED_HEADER_SIZE + 8  # header and two u32 lengths (topic block apart)
_MAX_QUEUE_ID = 2**31 - 1
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_decode_properties = msgspec.msgpack.Decoder(dict[str, str]).decode


# (result slot, topic, queue id, queue offset, physical offset, size, tag code, id, keys)
_Written = tuple[int, str, int, int, int, int, int, str, str]


class Writer:
    """Appends batches for one :class:`~pocketmq.store.MessageStore` (under its lock)."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self.config = store.config
        self._clock = store._clock
        self._commitlog = store._commitlog
        self._queues = store._queues
        self._queue = store._queue
        self._index = store._index
        self._store_host = pack_host(store.config.store_host)
        self._valid_topics: set[str] = set()
        self._guard = store.disk_guard
        self._errors = LogRate(log)  # one line a minute per kind of repeating error
        self.index_broken = ""
        self.messages_put = 0
        self.bytes_put = 0
        self.put_failures = 0

    def _refusal(self) -> tuple[PutStatus, str] | None:
        if self._store.closed:
            return PutStatus.SERVICE_NOT_AVAILABLE, "the store is closed"
        if self._store.failure:
            return PutStatus.STORE_FAILED, self._store.failure
        full = self._guard.refusal()
        if full:
            return PutStatus.DISK_FULL, f"the broker refuses writes: {full}"
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
            self.put_failures += len(messages)
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
            return self._fail_all(messages, exc, needed=config.segment_size)
        assert segment is not None
        segment_end = segment.base + segment.size
        position = chunk_start = commitlog.write_position
        next_offsets: dict[tuple[str, int], int] = {}
        ready_until: dict[tuple[str, int], int] = {}  # queue entries with disk reserved below

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
            if queue_offset is None or queue_offset >= ready_until[key]:
                queue = self._queue(topic, queue_id)
                if queue_offset is None:
                    queue_offset = queue.max_offset
                try:
                    queue_file, ready_until[key] = queue.prepare(queue_offset)
                except OSError as exc:
                    results[number] = self._queue_file_refusal(exc)
                    continue
                pinned.append((queue, queue_file))
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
                    self._note_write_error(exc, needed=config.segment_size)
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
                self._store.fail("writing consume-queue or index entries", exc)
                for item in written:
                    results[item[0]] = PutResult(
                        status=PutStatus.STORE_FAILED, reason=self._store.failure
                    )
        flusher = self._store.flusher
        if flusher is not None and position - flusher.flushed >= config.flush_dirty_bytes:
            flusher.kick()
        return results  # type: ignore[return-value]  # every slot is filled above

    def _queue_file_refusal(self, exc: OSError) -> PutResult:
        """The answer for a message whose consume-queue file could not be made ready."""
        self.put_failures += 1
        if isinstance(exc, SyncError):
            self._store.fail("an fsync of a consume-queue file", exc)
            return PutResult(status=PutStatus.STORE_FAILED, reason=self._store.failure)
        if exc.errno in _OUT_OF_DESCRIPTORS:
            self._errors.error("descriptors", "cannot open a consume-queue file: %s", exc)
            return PutResult(
                status=PutStatus.OUT_OF_RESOURCES,
                reason=f"the broker has no file descriptor left ({exc}); nothing was stored",
            )
        status = self._status_for(exc)
        if exc.errno in _NO_SPACE:
            self._guard.no_space(GROW_MAX, "reserving disk for a consume-queue file", exc)
        else:
            self._errors.error("queue-file", "cannot prepare a consume-queue file: %s", exc)
        return PutResult(status=status, reason=f"cannot prepare a consume-queue file: {exc}")

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
        if index_entries and not self.index_broken:
            try:
                self._index.put_many(index_entries)
            except OSError as exc:
                # The index is derived from the log: stop indexing and re-index on the next
                # start (the abort file stays), instead of refusing messages.
                self.index_broken = f"{exc}"
                log.error("the index stops until the next start, which rebuilds it: %s", exc)
        for number, topic, queue_id, queue_offset, physical, size, *_ in written:
            results[number] = PutResult(
                PutStatus.PUT_OK, topic, queue_id, queue_offset, physical, size, now_ms
            )
        self.messages_put += len(written)
        self.bytes_put += bytes_put

    def _validate(self, message: StoreMessage) -> PutResult | None:
        """Check every field before anything of the batch is written (a record that fails to
        encode half-way through a batch must not leave the others with reused offsets)."""
        topic = message.topic
        if topic not in self._valid_topics:
            if not isinstance(topic, str) or not is_storable_topic(topic):
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
        if self._store.failure:
            return PutStatus.STORE_FAILED
        if exc.errno in _NO_SPACE:
            return PutStatus.DISK_FULL
        if exc.errno in _OUT_OF_DESCRIPTORS:
            return PutStatus.OUT_OF_RESOURCES
        return PutStatus.UNKNOWN_ERROR

    def _note_write_error(self, exc: OSError, needed: int = 0) -> None:
        """A commit-log write or segment allocation (``needed`` bytes) failed: a full disk
        engages the guard (one WARNING), an I/O error fails the store (one CRITICAL), anything
        else is logged at most once a minute."""
        self.put_failures += 1
        if exc.errno in _NO_SPACE:
            what = "allocating a commit-log segment" if needed else "a commit-log write"
            self._guard.no_space(needed, what, exc)
        elif isinstance(exc, SyncError) or exc.errno == errno.EIO:
            self._store.fail("a commit-log write", exc)
        else:
            self._errors.error("commitlog", "commit log write failed: %s", exc)

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

    def _fail_all(
        self, messages: Sequence[StoreMessage], exc: OSError, needed: int = 0
    ) -> list[PutResult]:
        self._note_write_error(exc, needed)
        status = self._status_for(exc)
        self.put_failures += len(messages)
        return [PutResult(status=status, reason=str(exc))] * len(messages)
