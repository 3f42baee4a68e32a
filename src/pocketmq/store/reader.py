"""The read paths: messages of a queue from an offset, records by position, lookups by id and key.

Reads verify every record they return (CRC and position). A record that fails is never handed
out: if its own header agrees with its queue entry it is set aside in the quarantine and its
consumers move past it; if the entry is what is damaged, the entry is repaired from the log
(docs/storage-format.md §7).
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pocketmq.compiled import load
from pocketmq.properties import TAGS
from pocketmq.store.consumequeue import ConsumeQueue
from pocketmq.store.index import id_key, topic_key
from pocketmq.store.message import (
    GetResult,
    PutResult,
    QueueEntry,
    StoredMessage,
    StoreMessage,
)
from pocketmq.store.quarantine import LostEntry, QuarantinedRange
from pocketmq.store.record import MAGIC, compute_tag_code, pack_host, unpack_host
from pocketmq.store.status import GetStatus, PutStatus

if TYPE_CHECKING:
    from pocketmq.store._readpass import read_entries
    from pocketmq.store.state import StoreState
else:  # compiled, the entries' loop and per-record pass (docs/design.md "Compiled hot paths")
    read_entries = load("pocketmq.store._readpass").read_entries

__all__ = ["Appended", "Reader"]

log = logging.getLogger("pocketmq.store")

# an enum member read costs a dict lookup and a descriptor call each time on CPython 3.11:
# read once (docs/benchmarks.md, "Enum member reads and the front's forwarding, swept")
_FOUND = GetStatus.FOUND
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_MAX_REPAIR_SCAN = 64 * 1024 * 1024  # how much log a damaged queue entry's repair may read
_MAX_NEIGHBOUR_SEARCH = 4096  # entries looked at for the nearest valid neighbour
# total size, magic, crc, flags, queue id, queue offset, physical offset
_HEAD = struct.Struct("<IIIIIQQ")

#: A queue's last append: the messages as given, where the store put them, and the number of
#: the queue's last message among them (:attr:`Reader.appended`).
Appended = tuple[Sequence[StoreMessage], list[PutResult], int]
_PUT_OK = PutStatus.PUT_OK
# what :attr:`Reader.appended` keeps: appends of at most this much log, the queues of their last
# few messages, at most this many queues (bounds the memory it holds on to: 16 MiB)
_APPENDED_MAX_BYTES = 256 * 1024
_APPENDED_PER_BATCH = 8
_APPENDED_MAX_QUEUES = 64
_APPENDS_NOT_READ = 4  # appends kept until a read looks at them (older ones are dropped)


class Reader:
    """Reads for one store (on any thread; no store lock)."""

    def __init__(self, state: StoreState) -> None:
        self._clock = state.clock
        self._commitlog = state.commitlog
        self._queues = state.queues
        self._index = state.index
        self._quarantine = state.quarantine
        self.damaged_reads = 0
        self.visible_limit: int | None = None
        """Records ending past this log offset are not read yet (a replicated master's
        confirmed offset, docs/replication.md §3); None: every record is."""
        self._lock = state.lock
        self.appends: deque[tuple[Sequence[StoreMessage], list[PutResult]]] = deque(
            maxlen=_APPENDS_NOT_READ
        )
        """The store's last appends not looked at by a read yet (their messages as given and
        their results), added under the store's lock by :meth:`MessageStore.append` and taken
        into :attr:`appended` by the next read: the append itself only keeps references, so
        its acknowledgement does not wait for the bookkeeping."""
        self.appended: dict[tuple[str, int], Appended] = {}
        """The last append of each queue it touched (:meth:`_take_append`; emptied by
        :meth:`forget_appended` whenever the log or a queue is cut): a pull from one of its
        messages to the queue's end — the long poll that append woke — is answered from them
        instead of reading back and verifying the records just written
        (:meth:`_from_appended` says when). docs/design.md, "One message's path"."""
        self._store_host = unpack_host(pack_host(state.config.store_host))

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
        if self.appends:
            self._take_appends()
        key = (topic, queue_id)
        queue = self._queues.get(key)
        outside = _outside(queue, offset)
        if outside is not None:
            return outside
        assert queue is not None
        low, high = queue.min_offset, queue.max_offset
        appended = self.appended.get(key)
        # the queue's last entry the append's last message for it: a read to the end
        if appended is not None and appended[1][appended[2]].queue_offset == high - 1:
            got = self._from_appended(
                appended, offset, low, high, max_count, max_bytes, max_scan, tags
            )
            if got is not None:
                return got
        codes = {compute_tag_code(t) for t in tags} if tags is not None else None
        limit = self.visible_limit
        messages: list[StoredMessage] = []
        # the entries' loop and the per-record pass, compiled (store/_readpass.py): what fails
        # goes to :meth:`_unreadable_entry`, looked up here so a test patching it is seen
        cursor, removed, held = read_entries(
            queue,
            self._commitlog,
            offset,
            high,
            max_count,
            max_bytes,
            max_scan,
            codes,
            tags,
            self._quarantine if self._quarantine.skipping else None,
            -1 if limit is None else limit,
            topic,
            queue_id,
            self._unreadable_entry,
            messages,
        )
        if messages:
            return GetResult(_FOUND, messages, cursor, low, high)
        return GetResult(_nothing_found(held and cursor == offset, removed), [], cursor, low, high)

    def _take_appends(self) -> None:
        """Note the appends no read has looked at yet in :attr:`appended`, each under the
        queues of its last few messages (a queue's earlier messages in it are reached from its
        last one), unless its first or last message was refused or it spans more log than the
        bound."""
        with self._lock:
            appends = self.appends
            appended = self.appended
            while appends:
                messages, results = appends.popleft()
                count = len(results)
                if not count or count != len(messages):
                    continue
                head = results[0]
                tail = results[count - 1]
                if (
                    head.status is not _PUT_OK
                    or tail.status is not _PUT_OK
                    or tail.physical_offset + tail.size - head.physical_offset > _APPENDED_MAX_BYTES
                ):
                    continue
                if len(appended) >= _APPENDED_MAX_QUEUES:
                    appended.clear()
                first = count - _APPENDED_PER_BATCH if count > _APPENDED_PER_BATCH else 0
                for number in range(first, count):
                    result = results[number]
                    appended[(result.topic, result.queue_id)] = (messages, results, number)

    def forget_appended(self) -> None:
        """The log or a queue was cut (or the store closes): what appends kept is not what a
        read of the log would give any more."""
        self.appends.clear()
        self.appended.clear()

    def _from_appended(
        self,
        appended: Appended,
        offset: int,
        low: int,
        high: int,
        max_count: int,
        max_bytes: int,
        max_scan: int,
        tags: frozenset[str] | None,
    ) -> GetResult | None:
        """A read from ``offset`` to the queue's end (``high``), all of it written by the
        append :attr:`appended` holds: what reading the records back would give, built from
        the messages as given and where the append put them, or None when the read must look
        at the log — a record not visible yet under the visible limit, removed by retention or
        set aside, one the tag filter skips, a message of the range the append did not store,
        a read that takes nothing. The budgets are a read's (``_readpass.read_entries``): at
        most ``max_count`` and ``max_scan`` entries, and records while ``max_bytes`` holds,
        the first always."""
        messages, results, last = appended
        first = last - (high - 1 - offset)
        take = min(high - offset, max_count, max_scan)
        if first < 0 or take < 1:
            return None
        limit = self.visible_limit
        log_min = self._commitlog.min_offset
        quarantine = self._quarantine if self._quarantine.skipping else None
        codes = {compute_tag_code(t) for t in tags} if tags is not None else None
        store_host = self._store_host
        topic = results[last].topic
        queue_id = results[last].queue_id
        records: list[StoredMessage] = []
        size_total = 0
        cursor = offset + take
        for number in range(first, first + take):
            put = results[number]
            physical = put.physical_offset
            size = put.size
            if (
                put.status is not _PUT_OK
                or put.queue_offset != offset + number - first
                or put.queue_id != queue_id
                or put.topic != topic
                or physical < log_min
                or (limit is not None and physical + size > limit)
                or (quarantine is not None and quarantine.covering(physical) is not None)
            ):
                return None
            message = messages[number]
            properties = message.properties
            tag = properties.get(TAGS)
            code = message.tag_code
            if code is None:
                code = compute_tag_code(tag) if tag else 0  # what the writer put in the entry
            if (
                codes is not None
                and tags is not None
                and (code not in codes or (tag or None) not in tags)
            ):
                return None
            if records and size_total + size > max_bytes:
                cursor = put.queue_offset
                break
            records.append(_as_read(message, put, code, store_host))
            size_total += size
        return GetResult(_FOUND, records, cursor, low, high)

    def _unreadable_entry(
        self, topic: str, queue_id: int, queue_offset: int, physical: int, size: int, reason: str
    ) -> StoredMessage | None:
        """A queue entry did not lead to a valid record (docs/storage-format.md §7).

        If the record's own header agrees with the entry, the record is damaged: set it aside
        and let consumers move past it. Otherwise the entry itself is damaged: find the real
        record between the entry's neighbours in the log and repair the entry (a hole when the
        record is gone). The quarantine never takes a range on the word of a damaged entry.
        """
        self.damaged_reads += 1
        self.forget_appended()  # the entry may be repaired below: read it from the log again
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
        """Records of ``topic`` carrying business key ``key``, newest first; each candidate from the
        index is checked, so a hash collision never answers a wrong record."""
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


def _as_read(message: StoreMessage, put: PutResult, code: int, store_host: str) -> StoredMessage:
    """The record of ``message`` as a read of the log decodes it: where the append put it
    (``put``), its queue entry's tag ``code``, the store's host where it named none."""
    born = message.born_host
    physical = put.physical_offset
    return StoredMessage(
        put.topic,
        put.queue_id,
        put.queue_offset,
        physical,
        put.size,
        message.body,
        dict(message.properties),  # a read's own dict, as a decode gives
        message.flags,
        message.born_timestamp,
        put.store_timestamp,
        unpack_host(born) if born else store_host,
        store_host,
        message.reconsume_times,
        message.prepared_transaction_offset,
        code,
    )


def _outside(queue: ConsumeQueue | None, offset: int) -> GetResult | None:
    """The answer to a read at ``offset`` outside what ``queue`` holds (None: inside it)."""
    if queue is None or queue.max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
    low, high = queue.min_offset, queue.max_offset
    if offset < low:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, [], low, low, high)
    if offset == high:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, low, high)
    if offset > high:
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], high, low, high)
    return None


def _nothing_found(caught_up: bool, removed: bool) -> GetStatus:
    """Why a read inside the queue found no message: it ``caught_up`` with what may be read
    (the next record is not visible yet), every entry it met was ``removed`` (by retention, or
    set aside as damaged) or none matched the filter."""
    if caught_up:
        return GetStatus.OFFSET_OVERFLOW_ONE
    if removed:
        return GetStatus.MESSAGE_WAS_REMOVING
    return GetStatus.NO_MATCHED_MESSAGE
