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
from typing import TYPE_CHECKING, Any
from zlib import crc32

import msgspec

from pocketmq.names import is_storable_topic
from pocketmq.properties import KEYS, MESSAGE_ID
from pocketmq.store._commitlog import CommitLog, Segment
from pocketmq.store._consumequeue import ENTRY, GROW_MAX, ConsumeQueue
from pocketmq.store.files import SyncError
from pocketmq.store.index import ID_HASH_SEED, key_hashes
from pocketmq.store.lograte import LogRate
from pocketmq.store.message import (
    PutResult,
    StoreMessage,
)
from pocketmq.store.openfiles import QueueFile
from pocketmq.store.record import (
    FIXED_HEADER_SIZE,
    encode_properties_fast,
    encode_stored,
    pack_host,
    topic_block,
)
from pocketmq.store.status import PutStatus

if TYPE_CHECKING:
    from pocketmq.store.state import StoreState

__all__ = ["Writer"]

log = logging.getLogger("pocketmq.store")

_RECORD_OVERHEAD = FIXED_HEADER_SIZE + 8  # header and two u32 lengths (topic block apart)
_MAX_QUEUE_ID = 2**31 - 1
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_decode_properties = msgspec.msgpack.Decoder(dict[str, str]).decode
# read once: on Python 3.11 every ``Enum.MEMBER`` read goes through the enum type's
# ``__getattr__`` hook, and these are read per append
_PUT_OK = PutStatus.PUT_OK
_UNKNOWN_ERROR = PutStatus.UNKNOWN_ERROR
_LOST = (_UNKNOWN_ERROR, "")  # a batch's failure until a segment is lost (_Batch.failure)


# A message is read as ``Any`` where its fields are checked or handed on (``_append``,
# ``_append_one``, ``_prepare``, ``_refusal_of``): compiled (docs/design.md, "Compiled hot
# paths"), a field read as its declared type is checked on the way — a ``str`` body would raise
# ``TypeError`` where the rules below refuse it with a status — and an int unboxed to be boxed
# again. Queue keys are ``Any`` for the same reason: one tuple object, not rebuilt per lookup.

# (result slot, topic, queue id, queue offset, physical offset, size, tag code, properties)
_Written = tuple[int, str, int, int, int, int, int, dict[str, str]]


class _Batch:
    """One append's working state: the segment being filled, what is encoded but not yet
    written (``pieces``, ``pending``) and what is written (``written``)."""

    __slots__ = (
        "chunk_start",
        "failure",
        "next_offsets",
        "pending",
        "pieces",
        "position",
        "ready_until",
        "results",
        "segment",
        "segment_end",
        "written",
    )

    def __init__(self, count: int, segment: Segment, position: int) -> None:
        self.results: list[PutResult | None] = [None] * count
        self.written: list[_Written] = []
        self.pending: list[_Written] = []  # encoded into ``pieces``, not yet written
        self.pieces: list[bytes] = []
        self.failure = _LOST  # why messages after a lost segment fail
        self.segment: Segment | None = segment
        self.segment_end = segment.base + segment.size
        self.position = self.chunk_start = position
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.ready_until: dict[tuple[str, int], int] = {}  # queue entries with disk reserved below

    def refuse(self, number: int, status: PutStatus, reason: str) -> None:
        """Answer message ``number`` with ``status``: it is not written."""
        self.results[number] = PutResult(status=status, reason=reason)


class Writer:
    """Appends batches for one store (under its state's lock)."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self.config = state.config
        # the hot path's one hop, typed as this module's group names it (compiled: the twin
        # class, whose methods are called natively)
        commitlog: Any = state.commitlog
        self._commitlog: CommitLog = commitlog
        self._store_host = pack_host(state.config.store_host)
        # the limits every message is checked against, read once (the config is frozen)
        self._max_body = state.config.max_message_size
        self._max_properties = state.config.max_properties_size
        self._segment_size = state.config.segment_size
        self._blocks: dict[object, bytes] = {}  # the topics checked, and their topic blocks
        self._guard = state.disk_guard
        self._errors = LogRate(log)  # one line a minute per kind of repeating error
        self.index_broken = ""
        self.messages_put = 0
        self.bytes_put = 0
        self.put_failures = 0

    def _refusal(self) -> tuple[PutStatus, str] | None:
        if self._state.closed:
            return PutStatus.SERVICE_NOT_AVAILABLE, "the store is closed"
        if self._state.failure:
            return PutStatus.STORE_FAILED, self._state.failure
        full = self._guard.refusal()
        if full:
            return PutStatus.DISK_FULL, f"the broker refuses writes: {full}"
        return None

    def append(self, messages: Sequence[StoreMessage]) -> list[PutResult]:
        """Append ``messages`` (the caller holds the state's lock); the results line up with
        them. Every queue file the batch writes is opened and pinned before its message is
        logged, and released when the batch is done. One message (an await-each producer's
        send) takes :meth:`_append_one`, a batch :meth:`_append`: two shapes of one append,
        calling the same steps (:meth:`_prepare`, :meth:`_ready`, ``encode_stored``,
        :meth:`_fail_pending`, :meth:`_finish`)."""
        state = self._state
        # _refusal's three tests, without its frame unless one refuses (it names which)
        if state.closed or state.failure or self._guard.refusal():
            refusal = self._refusal()
            if refusal is not None:
                self.put_failures += len(messages)
                return [PutResult(status=refusal[0], reason=refusal[1])] * len(messages)
        now_ms = int(state.clock() * 1000)
        commitlog = self._commitlog
        try:
            segment = commitlog.active_segment()
        except OSError as exc:
            return self._fail_all(messages, exc, needed=self.config.segment_size)
        pinned: list[tuple[ConsumeQueue, QueueFile]] = []
        try:
            if len(messages) == 1:
                return [self._append_one(messages[0], pinned, now_ms, segment)]
            return self._append(messages, pinned, now_ms, segment)
        finally:
            for queue, queue_file in pinned:
                queue.unpin(queue_file)

    def _append_one(
        self,
        message: Any,
        pinned: list[tuple[ConsumeQueue, QueueFile]],
        now_ms: int,
        segment: Segment,
    ) -> PutResult:
        """One message, in the order :meth:`_append` takes a batch's first: checked, its queue
        file made ready, encoded and written (one ``pwrite``), dispatched. What it has no
        batch for — a record that does not fit the segment, whose roll-over may lose it — is
        :meth:`_append`'s, which takes it from the start."""
        prepared = self._prepare(message)
        if isinstance(prepared, PutResult):
            return prepared
        encoded_props, size, block = prepared
        commitlog = self._commitlog
        position = commitlog.write_position
        if position + size > segment.base + segment.size:
            return self._append((message,), pinned, now_ms, segment)[0]
        topic = message.topic
        queue_id = message.queue_id
        ready = self._ready((topic, queue_id), -1, pinned)
        if isinstance(ready, PutResult):
            return ready
        queue_offset = ready[0]
        prefix, meta, code = encode_stored(
            message, block, encoded_props, queue_offset, position, now_ms, self._store_host, size
        )
        written = [(0, topic, queue_id, queue_offset, position, size, code, message.properties)]
        results: list[PutResult | None] = [None]
        try:
            segment.write(position - segment.base, b"".join((prefix, meta, message.body)))
        except OSError as exc:
            self._fail_pending(written, results, exc)
            written = []
        else:
            position += size
        self._finish(written, position, now_ms, results)
        return results[0]  # type: ignore[return-value]  # answered above or by _finish

    def _append(
        self,
        messages: Sequence[Any],
        pinned: list[tuple[ConsumeQueue, QueueFile]],
        now_ms: int,
        segment: Segment,
    ) -> list[PutResult]:
        commitlog = self._commitlog
        batch = _Batch(len(messages), segment, commitlog.write_position)
        store_host = self._store_host
        next_offsets = batch.next_offsets
        pieces = batch.pieces
        pending = batch.pending
        for number, message in enumerate(messages):
            prepared = self._prepare(message)
            if isinstance(prepared, PutResult):
                batch.results[number] = prepared
                continue
            encoded_props, size, block = prepared
            # the queue position first: a queue file that cannot be created refuses the
            # message before it is in the log (a logged record is always dispatched); a queue
            # this batch already made ready far enough needs no call
            topic = message.topic
            queue_id = message.queue_id
            key: Any = (topic, queue_id)
            queue_offset = next_offsets.get(key, -1)
            if queue_offset < 0 or queue_offset >= batch.ready_until[key]:
                ready = self._ready(key, queue_offset, pinned)
                if isinstance(ready, PutResult):
                    batch.results[number] = ready
                    continue
                queue_offset, batch.ready_until[key] = ready
            position = batch.position
            if batch.segment is None or position + size > batch.segment_end:
                if not self._make_room(batch, number, size):  # next segment, or lost
                    continue
                position = batch.position
            # the record, encoded at the batch's position (written with the rest of its chunk)
            prefix, meta, code = encode_stored(
                message, block, encoded_props, queue_offset, position, now_ms, store_host, size
            )
            pieces += (prefix, meta, message.body)
            pending.append(
                (number, topic, queue_id, queue_offset, position, size, code, message.properties)
            )
            batch.position = position + size
            next_offsets[key] = queue_offset + 1
        if pending:
            self._write_chunk(batch)
        self._finish(batch.written, batch.position, now_ms, batch.results)
        return batch.results  # type: ignore[return-value]  # every slot is filled above

    def _prepare(self, message: Any) -> tuple[bytes, int, bytes] | PutResult:
        """The encoded properties, record size and topic block of ``message``, or why it is
        refused. Every field is checked before anything of the batch is written (a record
        that fails to encode half-way through a batch must not leave the others with reused
        offsets); the checks a valid message passes are one expression, and
        :meth:`_refusal_of` names the first one broken."""
        topic = message.topic
        block = self._blocks.get(topic)  # a topic seen before: valid, its block encoded
        body = message.body
        tag_code = message.tag_code
        if (
            block is None
            or not 0 <= message.queue_id <= _MAX_QUEUE_ID
            or not isinstance(body, bytes)
            or len(body) > self._max_body
            or not 0 <= message.flags <= _U32_MAX
            or not 0 <= message.born_timestamp <= _U64_MAX
            or not 0 <= message.reconsume_times <= _U32_MAX
            or not 0 <= message.prepared_transaction_offset <= _U64_MAX
            or (tag_code is not None and not 0 <= tag_code <= _U64_MAX)
            or len(message.born_host) not in (0, 18)
        ):
            problem = self._refusal_of(message)
            if problem is not None:
                return problem
            block = topic_block(topic)
            if len(self._blocks) < 100_000:
                self._blocks[topic] = block
        try:
            encoded_props = encode_properties_fast(message.properties)
            _decode_properties(encoded_props)  # strings only: the record must decode later
        except (TypeError, ValueError, UnicodeError, msgspec.ValidationError) as exc:
            return PutResult(
                status=PutStatus.MESSAGE_ILLEGAL, reason=f"properties cannot be stored: {exc}"
            )
        max_props = self._max_properties
        if len(encoded_props) > max_props:
            return PutResult(
                status=PutStatus.PROPERTIES_TOO_LARGE,
                reason=f"properties are {len(encoded_props)} bytes, limit {max_props}",
            )
        size = _RECORD_OVERHEAD + len(block) + len(encoded_props) + len(body)
        if size > self._segment_size:
            return PutResult(
                status=PutStatus.MESSAGE_TOO_LARGE,
                reason=f"record of {size} bytes does not fit a {self._segment_size}-byte segment",
            )
        return encoded_props, size, block

    def _ready(
        self, key: Any, queue_offset: int, pinned: list[tuple[ConsumeQueue, QueueFile]]
    ) -> tuple[int, int] | PutResult:
        """Make queue ``key``'s file ready for the entry at ``queue_offset`` (-1: the queue's
        next) and pin it: the queue offset and the first offset past the entries made ready
        with it, or the refusal when the file cannot be."""
        queue = self._state.queues.get(key)  # created by ``queue`` on first use only
        if queue is None:
            queue = self._state.queue(*key)
        if queue_offset < 0:
            queue_offset = queue.max_offset
        try:
            queue_file, ready_until = queue.prepare(queue_offset)
        except OSError as exc:
            return self._queue_file_refusal(exc)
        pinned.append((queue, queue_file))
        return queue_offset, ready_until

    def _make_room(self, batch: _Batch, number: int, size: int) -> bool:
        """Make sure a record of ``size`` bytes fits the segment being filled: when it does
        not, write what is pending, seal the segment and open the next. False (the message
        answered) when the segment is lost."""
        if batch.segment is None:
            batch.refuse(number, *batch.failure)
            return False
        if batch.position + size <= batch.segment_end:
            return True
        commitlog = self._commitlog
        lost = self._write_chunk(batch)
        if lost is not None:
            batch.segment = None
            batch.failure = (self._status_for(lost), str(lost))
            batch.refuse(number, *batch.failure)
            return False
        commitlog.write_position = batch.position
        try:
            commitlog.seal(batch.segment)
            segment = commitlog.active_segment()
        except OSError as exc:
            self._note_write_error(exc, needed=self.config.segment_size)
            batch.segment = None
            batch.position = batch.chunk_start = commitlog.write_position
            reason = f"cannot allocate a commit-log segment: {exc}"
            batch.failure = (self._status_for(exc), reason)
            batch.refuse(number, *batch.failure)
            return False
        batch.segment = segment
        batch.segment_end = segment.base + segment.size
        batch.position = batch.chunk_start = commitlog.write_position
        return True

    def _write_chunk(self, batch: _Batch) -> OSError | None:
        """Write what is encoded since the chunk began (one ``pwrite``): its messages become
        written, or are answered with the error, which is returned (the log's end stays at
        the chunk's start)."""
        segment = batch.segment
        assert segment is not None
        try:
            if batch.pieces:
                segment.write(batch.chunk_start - segment.base, b"".join(batch.pieces))
            batch.written.extend(batch.pending)
        except OSError as exc:
            self._fail_pending(batch.pending, batch.results, exc)
            batch.position = batch.chunk_start
            return exc
        finally:
            batch.pieces.clear()
            batch.pending.clear()
        return None

    def _queue_file_refusal(self, exc: OSError) -> PutResult:
        """The answer for a message whose consume-queue file could not be made ready."""
        self.put_failures += 1
        if isinstance(exc, SyncError):
            self._state.fail("an fsync of a consume-queue file", exc)
            return PutResult(status=PutStatus.STORE_FAILED, reason=self._state.failure)
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

    def _finish(
        self, written: list[_Written], end: int, now_ms: int, results: list[PutResult | None]
    ) -> None:
        """Move the log's end to ``end``; dispatch what is written: each message answered, its
        queue entries written (one ``pwrite`` per queue), its id and keys indexed; wake the
        flusher when enough is dirty. Both shapes of the append end here."""
        self._commitlog.write_position = end
        by_queue: dict[tuple[str, int], list[bytes]] = {}
        first_offsets: dict[tuple[str, int], int] = {}
        index_entries: list[tuple[int, int]] = []  # (key hash, physical offset)
        pack_entry = ENTRY.pack
        bytes_put = 0
        ok = _PUT_OK
        for number, topic, queue_id, queue_offset, physical, size, code, props in written:
            key = (topic, queue_id)
            entries = by_queue.get(key)
            if entries is None:
                entries = by_queue[key] = []
                first_offsets[key] = queue_offset
            entries.append(pack_entry(physical, size, code))
            message_id = props.get(MESSAGE_ID)
            if message_id:  # id_hash(message_id), without its frame
                index_entries.append((crc32(message_id.encode(), ID_HASH_SEED), physical))
            keys = props.get(KEYS)
            if keys:
                index_entries += [(h, physical) for h in key_hashes(topic, keys)]
            bytes_put += size
            # answered now: should a queue write below fail, every written message is
            # answered STORE_FAILED over this
            results[number] = PutResult(ok, topic, queue_id, queue_offset, physical, size, now_ms)
        queues = self._state.queues
        try:
            for key, entries in by_queue.items():
                packed = entries[0] if len(entries) == 1 else b"".join(entries)
                queues[key].put(first_offsets[key], packed, pinned=True)
        except OSError as exc:
            # The records are in the log but their queue entries are not: recovery must
            # dispatch them, so no further write may be accepted before a restart.
            self._state.fail("writing consume-queue or index entries", exc)
            for item in written:
                results[item[0]] = PutResult(
                    status=PutStatus.STORE_FAILED, reason=self._state.failure
                )
        else:
            if index_entries and not self.index_broken:
                try:
                    self._state.index.put_hashed(index_entries)
                except OSError as exc:
                    # The index is derived from the log: stop indexing and re-index on the
                    # next start (the abort file stays), instead of refusing messages.
                    self.index_broken = f"{exc}"
                    log.error("the index stops until the next start, which rebuilds it: %s", exc)
            self.messages_put += len(written)
            self.bytes_put += bytes_put
        flusher = self._state.flusher
        if flusher is not None and end - flusher.flushed >= self.config.flush_dirty_bytes:
            flusher.kick()

    def _refusal_of(self, message: Any) -> PutResult | None:
        """Why ``message`` is refused, the first rule it breaks (None: a topic not seen before,
        now checked)."""
        topic = message.topic
        if not isinstance(topic, str) or not is_storable_topic(topic):
            return PutResult(
                status=PutStatus.MESSAGE_ILLEGAL,
                reason=f"topic {topic!r} must be 1-127 characters of [A-Za-z0-9_%|-]",
            )
        if not 0 <= message.queue_id <= _MAX_QUEUE_ID:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, reason="queue id out of range")
        if not isinstance(message.body, bytes):
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, reason="body must be bytes")
        if len(message.body) > self._max_body:
            return PutResult(
                status=PutStatus.MESSAGE_TOO_LARGE,
                reason=f"body is {len(message.body)} bytes, limit {self._max_body}",
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
        if self._state.failure:
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
            self._state.fail("a commit-log write", exc)
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
