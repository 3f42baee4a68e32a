"""A slave's write path: raw commit-log bytes from the master, verified, written verbatim.

A slave's log is a byte-for-byte copy of its master's, so offsets are the same on every replica
(docs/replication.md §2). A chunk is checked record by record before anything of it is written —
each record's CRC, and that its physical offset is where it lands — so a chunk damaged in flight
is refused whole and the slave resumes from its last good offset. The records are then dispatched
with the same rules as recovery's replay (consume queues at the records' own queue offsets, index
keys, tombstones).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from pocketmq.errors import StoreError
from pocketmq.names import TOMBSTONE_TOPIC
from pocketmq.properties import KEYS, MESSAGE_ID
from pocketmq.store.consumequeue import ENTRY
from pocketmq.store.files import atomic_write, fsync_directory
from pocketmq.store.index import id_hash, key_hashes
from pocketmq.store.quarantine import QuarantinedRange
from pocketmq.store.record import (
    BLANK_MAGIC,
    RecordError,
    RecordSkim,
    skim_record,
)

if TYPE_CHECKING:
    from pocketmq.store.state import StoreState

__all__ = ["ReplicaError", "ReplicaWriter"]

_PREFIX: Final = struct.Struct("<II")


class ReplicaError(StoreError):
    """A chunk from the master that cannot be written (out of place, or damaged)."""


class ReplicaWriter:
    """Appends verified chunks to one store (under its lock), cuts divergent suffixes, and cuts
    holes (docs/replication.md §4): a replica never keeps a damaged range its master can give
    it again."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._pending_path = os.path.join(state.directory, "refetch")
        self.pending = _read_pending(self._pending_path)
        """The log end this replica had before it cut a hole to copy it again (0: none): until
        its log reaches it again it lacks records it once held, and is neither in sync nor
        electable."""

    def append(self, offset: int, data: bytes, written: Callable[[int], None] | None = None) -> int:
        """Write ``data`` (whole records of one segment) at ``offset``; returns the new end.
        ``written(end)`` is called once the records are in the log and before they are
        dispatched: what a slave acknowledges is its log, as in RocketMQ, since dispatching is
        redone from the log by recovery (docs/replication.md §2)."""
        store = self._state
        commitlog = store.commitlog
        if store.failure:
            raise ReplicaError(f"the store accepts no writes ({store.failure})")
        if offset != commitlog.write_position:
            raise ReplicaError(f"chunk at {offset}, but the log ends at {commitlog.write_position}")
        if not data:
            return offset
        segment = commitlog.active_segment()
        segment_end = segment.base + segment.size
        if offset + len(data) > segment_end:
            raise ReplicaError(f"chunk at {offset} of {len(data)} bytes crosses a segment")
        records = _verify(data, offset, segment_end)
        segment.write(offset - segment.base, data)
        end = offset + len(data)
        commitlog.write_position = end
        try:
            if written is not None:
                written(end)
        finally:  # what is in the log is dispatched, whatever the callback did
            self._dispatch_or_fail(records)
        if self.pending and end >= self.pending:
            self.settled()
        flusher = store.flusher
        if flusher is not None:
            flusher.kick()
        return end

    def _dispatch_or_fail(self, records: list[RecordSkim]) -> None:
        """Dispatch, or stop the store: records in the log whose queue entries could not be
        written must be dispatched by recovery, so nothing more may be written (and no
        checkpoint may claim them) before a restart — as on a master (storage-format.md §5)."""
        try:
            self._dispatch(records)
        except OSError as exc:
            self._state.fail("writing a replica's consume-queue or index entries", exc)
            raise ReplicaError(
                f"could not dispatch replicated records ({exc}); the store accepts no writes "
                "until the broker restarts and recovers them from the log"
            ) from exc

    def _dispatch(self, records: list[RecordSkim]) -> None:
        store = self._state
        runs: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        index_entries: list[tuple[int, int]] = []  # (key hash, physical offset)

        def flush_runs() -> None:
            for (topic, queue_id), (first, entries) in runs.items():
                store.queue(topic, queue_id).put(first, b"".join(entries))
            runs.clear()

        for record in records:
            if record.topic == TOMBSTONE_TOPIC:
                flush_runs()
                store.forget_queues(bytes(record.body).decode("utf-8", "replace"))
            key = (record.topic, record.queue_id)
            entry = ENTRY.pack(record.physical_offset, record.size, record.tag_code)
            run = runs.get(key)
            if run is not None and run[0] + len(run[1]) == record.queue_offset:
                run[1].append(entry)
            else:
                if run is not None:
                    store.queue(*key).put(run[0], b"".join(run[1]))
                runs[key] = (record.queue_offset, [entry])
            message_id = record.properties.get(MESSAGE_ID, "")
            if message_id:
                index_entries.append((id_hash(message_id), record.physical_offset))
            keys = record.properties.get(KEYS, "")
            if keys:
                physical = record.physical_offset
                index_entries += [(h, physical) for h in key_hashes(record.topic, keys)]
        flush_runs()
        if index_entries:
            store.index.put_hashed(index_entries)

    def cut(self, offset: int, reason: str) -> QuarantinedRange | None:
        """Drop the log from ``offset`` on (a suffix the new master never had): its bytes go to
        the quarantine (kind ``divergent``) and the queue entries pointing there are removed,
        so the master's records take those queue offsets (docs/replication.md §4)."""
        store = self._state
        commitlog = store.commitlog
        end = commitlog.write_position
        if offset >= end:
            return None
        item = store.quarantine_span(offset, end, "divergent", reason)
        commitlog.truncate(offset)
        for queue in store.queues.values():
            queue.cut(offset)
        store.epochs.truncate(offset)
        return item

    def holes(self) -> list[QuarantinedRange]:
        """The damaged ranges still inside the log (set aside by a repair or a read)."""
        return self._state.quarantine.holes(self._state.commitlog.write_position)

    def refetch(self, offset: int) -> None:
        """Cut the log at ``offset``, the first damaged range a repair set aside, to copy
        everything from there again from the master. The cut bytes are not saved: the master
        has them (the damaged ones were saved when they were set aside). What the log held is
        remembered (``pending``, durably) until it is copied back."""
        store = self._state
        with store.lock:
            commitlog = store.commitlog
            end = commitlog.write_position
            if offset >= end:
                return
            pending = max(self.pending, end)
            atomic_write(self._pending_path, f"{pending}\n".encode(), "replica")
            self.pending = pending
            store.quarantine.release(offset, "cut to be copied again from the master")
            commitlog.truncate(offset)
            for queue in store.queues.values():
                queue.cut(offset)
            store.epochs.truncate(offset)

    def settled(self) -> None:
        """The replica holds again everything it once had (or a forced promotion gave it up).
        Called under the store's lock by :meth:`append`, or alone."""
        self.pending = 0
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._pending_path)
            fsync_directory(self._state.directory)


def _read_pending(path: str) -> int:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return 0
    return int(text) if text.isdigit() else 0


def _verify(data: bytes, offset: int, segment_end: int) -> list[RecordSkim]:
    records: list[RecordSkim] = []
    position = 0
    size = len(data)
    while position < size:
        here = offset + position
        room = segment_end - here
        if room < _PREFIX.size:  # the few bytes no record fits in: zeros to the segment's end
            if size - position != room or any(data[position:]):
                raise ReplicaError(f"bad segment tail at {here}")
            break
        total, magic = _PREFIX.unpack_from(data, position)
        if magic == BLANK_MAGIC:
            if total != room or position + total != size:
                raise ReplicaError(f"a blank record at {here} must end the chunk and segment")
            break
        try:
            record = skim_record(data, position, here)
        except RecordError as exc:
            raise ReplicaError(f"record at {here} fails verification ({exc.reason})") from exc
        records.append(record)
        position += record.size
    return records
