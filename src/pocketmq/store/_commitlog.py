"""The commit log: fixed-size segment files holding every record back to back.

Segments are allocated in full when created, so a full disk shows up as a failed allocation (a
status the broker returns) rather than a failed write halfway through a record. Reads go through
``pread`` on the segment's descriptor; the page cache makes them cheap right after a write.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, NamedTuple

from pocketmq.errors import StoreCorruptedError
from pocketmq.store.files import (
    allocate,
    fdatasync,
    fsync,
    fsync_directory,
    open_file,
    pread_full,
    pwrite_full,
)
from pocketmq.store.message import StoredMessage
from pocketmq.store.record import (
    BLANK_MAGIC,
    MAGIC,
    MIN_RECORD_SIZE,
    RecordError,
    decode_record,
)

if TYPE_CHECKING:
    from pocketmq.store.quarantine import Quarantine

__all__ = ["CommitLog", "Damage", "Segment"]

log = logging.getLogger("pocketmq.store")

_PREFIX: Final = struct.Struct("<II")
_SCAN_WINDOW: Final = 8 * 1024 * 1024
_EXTENT_STEP: Final = 1 << 20
_MAGIC_BYTES: Final = struct.pack("<I", MAGIC)
_BLANK_BYTES: Final = struct.pack("<I", BLANK_MAGIC)


class Damage(NamedTuple):
    """A stretch of the log that failed verification (see :meth:`CommitLog.scan`)."""

    start: int
    end: int
    reason: str
    tail: bool


def segment_name(base: int) -> str:
    """A segment's file name: its base offset, zero-padded so names sort in log order."""
    return f"{base:020d}"


class Segment:
    """One commit-log file covering physical offsets ``[base, base + size)``."""

    __slots__ = ("base", "closed", "fd", "path", "size")

    def __init__(self, path: str, base: int, size: int, fd: int) -> None:
        self.path = path
        self.base = base
        self.size = size
        self.fd = fd
        self.closed = False

    @classmethod
    def create(cls, directory: str, base: int, size: int) -> Segment:
        """Create and fully allocate the segment that starts at ``base``: a full disk fails here,
        before any record is written into it, and the directory entry is made durable."""
        path = os.path.join(directory, segment_name(base))
        fd = open_file(path, os.O_RDWR | os.O_CREAT, "commitlog")
        try:
            allocate(fd, size, "commitlog")
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        fsync_directory(directory)
        return cls(path, base, size, fd)

    @classmethod
    def open(cls, path: str, base: int, size: int) -> Segment:
        """Open an existing segment file found at start-up."""
        fd = os.open(path, os.O_RDWR)
        return cls(path, base, size, fd)

    def ensure_allocated(self) -> None:
        """Allocate the rest of a segment found shorter than its size before it takes writes
        again (after a truncation by recovery), so later writes cannot fail for lack of space."""
        if os.fstat(self.fd).st_size < self.size:
            allocate(self.fd, self.size, "commitlog")

    def truncate_from(self, position: int) -> None:
        """Drop everything from ``position`` on; the file reads as zeros there afterwards."""
        os.ftruncate(self.fd, position)
        allocate(self.fd, self.size, "commitlog")
        fsync(self.fd, "commitlog")

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` within the segment (one ``pread``)."""
        return pread_full(self.fd, size, position)

    def write(self, position: int, data: bytes) -> None:
        """Write ``data`` at ``position`` within the segment, all of it or an error."""
        pwrite_full(self.fd, data, position, "commitlog")

    def sync(self) -> None:
        """Make the segment's written data durable (``fdatasync``: the size never changes, so
        metadata need not be synced)."""
        fdatasync(self.fd, "commitlog")

    def close(self) -> None:
        """Close the descriptor once (retired segments are closed late, and twice must be
        harmless)."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)


class CommitLog:
    """Segment bookkeeping, reads by physical offset, flushing and recovery scanning.

    Appends are driven by :class:`pocketmq.store.MessageStore`, which holds the write lock; this
    class only knows bytes and positions.
    """

    def __init__(self, directory: str, segment_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        os.makedirs(directory, exist_ok=True)
        self._segments: list[Segment] = []
        self._segments_lock = threading.Lock()
        self._retired: list[Segment] = []
        self.write_position = 0
        self.flushed_position = 0
        self.scan_end = 0
        self.scan_damage: list[Damage] = []
        self._extent: int | None = None
        self._load_segments()

    # -- segments -------------------------------------------------------------------------

    def _load_segments(self) -> None:
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit() and len(n) == 20)
        expected: int | None = None
        for name in names:
            base = int(name)
            if base % self.segment_size:
                raise StoreCorruptedError(
                    "segment name is not a multiple of the segment size",
                    path=os.path.join(self.directory, name),
                    offset=base,
                )
            if expected is not None and base != expected:
                raise StoreCorruptedError(
                    "commit log segments are not contiguous",
                    path=os.path.join(self.directory, name),
                    offset=expected,
                )
            self._segments.append(
                Segment.open(os.path.join(self.directory, name), base, self.segment_size)
            )
            expected = base + self.segment_size
        if self._segments:
            self.write_position = self._segments[0].base

    @property
    def segments(self) -> list[Segment]:
        """A snapshot of the live segments, safe to iterate while another thread appends or
        deletes."""
        with self._segments_lock:
            return list(self._segments)

    @property
    def min_offset(self) -> int:
        """The oldest physical offset still on disk (retention moves it forward)."""
        with self._segments_lock:
            return self._segments[0].base if self._segments else 0

    def active_segment(self) -> Segment:
        """The segment the next append goes to (created on first use)."""
        with self._segments_lock:
            if self._segments:
                last = self._segments[-1]
                if self.write_position < last.base + last.size:
                    return last
                base = last.base + last.size
            else:
                base = self.write_position - self.write_position % self.segment_size
        segment = Segment.create(self.directory, base, self.segment_size)
        with self._segments_lock:
            self._segments.append(segment)
        self.write_position = max(self.write_position, base)
        return segment

    def segment_for(self, offset: int) -> Segment | None:
        """The segment holding physical ``offset``, found by arithmetic (segments are contiguous and
        equal-sized), or None outside the log."""
        with self._segments_lock:
            if not self._segments:
                return None
            index = (offset - self._segments[0].base) // self.segment_size
            if 0 <= index < len(self._segments):
                return self._segments[index]
            return None

    def seal(self, segment: Segment) -> None:
        """Fill the rest of ``segment`` with a blank record and move the write position on."""
        position = self.write_position - segment.base
        remaining = segment.size - position
        if remaining >= _PREFIX.size:
            segment.write(position, _PREFIX.pack(remaining, BLANK_MAGIC))
        self.write_position = segment.base + segment.size

    # -- reads ----------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at physical ``offset``, or None when they are not (or no longer) in the
        log: a read racing retention gets an answer, not an exception."""
        segment = self.segment_for(offset)
        if segment is None or segment.closed:
            return None
        position = offset - segment.base
        if position + size > segment.size:
            return None
        return segment.read(position, size)

    def read_chunk(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from ``offset`` within its segment, for replication (see
        MessageStore.read_log). A record boundary is assumed at ``offset``."""
        end = self.write_position
        segment = self.segment_for(offset)
        if segment is None or offset >= end:
            return b""
        segment_end = segment.base + segment.size
        limit = min(end, segment_end)
        if limit == offset:
            return b""
        data = segment.read(offset - segment.base, min(limit - offset, max(max_bytes, 1)))
        position = 0
        while position + _PREFIX.size <= len(data):
            total, magic = _PREFIX.unpack_from(data, position)
            if magic == BLANK_MAGIC or total == 0:
                if end >= segment_end:  # the segment was sealed: send its tail too
                    return data[:position] + segment.read(
                        offset + position - segment.base, segment_end - offset - position
                    )
                break
            if position + total > len(data):
                if position == 0:  # one record larger than max_bytes: send it whole
                    return segment.read(offset - segment.base, total)
                break
            position += total
        if position + _PREFIX.size > len(data) and offset + len(data) == segment_end:
            return data  # the few bytes no record fits in, to the segment's end
        return data[:position]

    def read_span(self, start: int, end: int) -> bytes:
        """The bytes ``[start, end)``, across segments (what exists of them)."""
        pieces = []
        position = start
        while position < end:
            segment = self.segment_for(position)
            if segment is None:
                break
            stop = min(end, segment.base + segment.size)
            pieces.append(segment.read(position - segment.base, stop - position))
            position = stop
        return b"".join(pieces)

    def read_record(self, offset: int) -> StoredMessage | None:
        """The valid record at ``offset``, or None (no record there, or it does not verify)."""
        head = self.read(offset, _PREFIX.size)
        if head is None:
            return None
        total, magic = _PREFIX.unpack(head)
        if magic != MAGIC or total < MIN_RECORD_SIZE:
            return None
        data = self.read(offset, total)
        if data is None:
            return None
        try:
            return decode_record(data, expected_physical_offset=offset)
        except RecordError:
            return None

    # -- flushing -------------------------------------------------------------------------

    def sync_to(self, target: int) -> None:
        """fdatasync every segment holding bytes in ``[flushed_position, target)``."""
        start = self.flushed_position
        if target <= start:
            return
        with self._segments_lock:
            todo = [s for s in self._segments if s.base < target and s.base + s.size > start]
        for segment in todo:
            if not segment.closed:
                segment.sync()
        self.flushed_position = target

    # -- recovery -------------------------------------------------------------------------

    def scan(self, start: int, *, skip: Quarantine | None = None) -> Iterator[StoredMessage]:
        """Yield the valid records from ``start`` on, stepping over damage.

        Afterwards ``scan_end`` is the end of the last valid record (where appends continue) and
        ``scan_damage`` lists every stretch that failed verification: a stretch followed by a
        valid record is damage *inside* the log; a last stretch with nothing valid after it
        (``tail``) is where the written log ends in damage. Ranges already in ``skip`` (the
        quarantine) are stepped over silently (docs/storage-format.md §6).
        """
        self.scan_end = start
        self.scan_damage = []
        self._extent = None
        segment = self._scan_start(start)
        if segment is None:
            return
        position = self.scan_end - segment.base  # _scan_start moves a start before the log
        while segment is not None:
            window = b""
            window_start = position
            anomaly = ""
            while True:
                if segment.size - position < _PREFIX.size:
                    break  # too little room for anything: the segment is full
                if position + _PREFIX.size > window_start + len(window):
                    window_start = position
                    window = segment.read(position, min(_SCAN_WINDOW, segment.size - position))
                total, magic = _PREFIX.unpack_from(window, position - window_start)
                if magic == BLANK_MAGIC and total == segment.size - position:
                    break
                if skip is not None:
                    known = skip.covering(segment.base + position)
                    if known is not None:
                        position = known.end - segment.base
                        if position >= segment.size:
                            break
                        continue
                if total == 0 and magic == 0:
                    anomaly = "zeros"
                    break
                if magic != MAGIC or total < MIN_RECORD_SIZE or position + total > segment.size:
                    anomaly = "invalid record header"
                    break
                if position + total > window_start + len(window):
                    window_start = position
                    window = segment.read(
                        position, max(total, min(_SCAN_WINDOW, segment.size - position))
                    )
                try:
                    record = decode_record(
                        window,
                        position - window_start,
                        expected_physical_offset=segment.base + position,
                    )
                except RecordError as exc:
                    anomaly = exc.reason
                    break
                position += total
                self.scan_end = segment.base + position
                yield record
            if anomaly:
                found = self._note_damage(segment.base + position, anomaly)
                if found is None:
                    return
                segment = self.segment_for(found)
                assert segment is not None
                position = found - segment.base
                continue
            # next segment
            next_base = segment.base + segment.size
            self.scan_end = next_base
            segment = self.segment_for(next_base)
            position = 0

    def _scan_start(self, start: int) -> Segment | None:
        """The segment a scan from ``start`` begins in (``scan_end`` moved to the oldest
        segment's base when ``start`` is before it), or None: nothing to scan, and a damage
        noted when ``start`` is beyond the end of the log."""
        segment = self.segment_for(start)
        if segment is not None:
            return segment
        if self._segments and start < self._segments[0].base:
            segment = self._segments[0]
            self.scan_end = segment.base
            return segment
        if self._segments and start > self._segments[-1].base + self.segment_size:
            self.scan_damage.append(
                Damage(start, start, "checkpoint beyond the end of the log", tail=True)
            )
        return None

    def _note_damage(self, at: int, anomaly: str) -> int | None:
        """A scan found ``anomaly`` at ``at``: note the damaged stretch in ``scan_damage`` and
        return where the next valid record starts, or None when nothing valid follows (the
        stretch up to the written extent is then the log's damaged tail)."""
        found = self.next_valid(at + 1)
        if found is None:
            extent = self.written_extent()
            if extent > at:
                reason = "a partly written or damaged tail" if anomaly == "zeros" else anomaly
                self.scan_damage.append(Damage(at, extent, reason, tail=True))
            return None
        reason = "zeroed bytes inside the log" if anomaly == "zeros" else anomaly
        self.scan_damage.append(Damage(at, found, reason, tail=False))
        return found

    def written_extent(self) -> int:
        """The offset just past the last non-zero byte of the log (cached for one scan)."""
        if self._extent is not None:
            return self._extent
        extent = self._segments[0].base if self._segments else 0
        for segment in reversed(self.segments):
            size = min(os.fstat(segment.fd).st_size, segment.size)
            position = size
            while position > 0:
                chunk_start = max(0, position - _EXTENT_STEP)
                stripped = len(segment.read(chunk_start, position - chunk_start).rstrip(b"\x00"))
                if stripped:
                    extent = segment.base + chunk_start + stripped
                    break
                position = chunk_start
            if position > 0:
                break
        self._extent = extent
        return extent

    def next_valid(self, offset: int) -> int | None:
        """The offset of the first valid record (or end-of-segment blank) at or after
        ``offset``, searching up to the written extent; None when there is none."""
        extent = self.written_extent()
        segment = self.segment_for(offset)
        while segment is not None and segment.base < extent:
            position = max(0, offset - segment.base)
            limit = min(segment.size, extent - segment.base)
            while position < limit:
                chunk_end = min(limit, position + _SCAN_WINDOW)
                # a record's magic sits 4 bytes into it: look for it from position + 4
                data = segment.read(position, chunk_end - position + 8)
                found = {p: data.find(p, 4) for p in (_MAGIC_BYTES, _BLANK_BYTES)}
                while True:
                    hits = [(i, p) for p, i in found.items() if i != -1]
                    if not hits:
                        break
                    index, pattern = min(hits)
                    candidate = position + index - 4
                    if candidate >= chunk_end:
                        break
                    if self._valid_at(segment, candidate):
                        return segment.base + candidate
                    found[pattern] = data.find(pattern, index + 1)
                position = chunk_end
            segment = self.segment_for(segment.base + segment.size)
        return None

    def _valid_at(self, segment: Segment, position: int) -> bool:
        if position < 0 or segment.size - position < _PREFIX.size:
            return False
        total, magic = _PREFIX.unpack(segment.read(position, _PREFIX.size))
        if magic == BLANK_MAGIC:
            return bool(total == segment.size - position)
        if magic != MAGIC or total < MIN_RECORD_SIZE or position + total > segment.size:
            return False
        try:
            decode_record(
                segment.read(position, total), expected_physical_offset=segment.base + position
            )
        except RecordError:
            return False
        return True

    def truncate(self, end: int) -> int:
        """Drop everything from ``end`` on; returns the number of segment files deleted."""
        with self._segments_lock:
            keep = [s for s in self._segments if s.base < end] or self._segments[:1]
            drop = self._segments[len(keep) :]
            self._segments = keep
        for segment in drop:
            segment.close()
            os.unlink(segment.path)
        if drop:
            fsync_directory(self.directory)
        if keep:
            last = keep[-1]
            if end < last.base + last.size:
                last.truncate_from(max(0, end - last.base))
            else:
                last.ensure_allocated()
        self.write_position = end
        self.flushed_position = min(self.flushed_position, end)
        return len(drop)

    # -- retention ------------------------------------------------------------------------

    def delete_oldest(self, count: int, flushed: int) -> list[Segment]:
        """Remove up to ``count`` oldest segments that are fully flushed and not active."""
        removed: list[Segment] = []
        with self._segments_lock:
            while (
                len(removed) < count
                and len(self._segments) > 1
                and self._segments[0].base + self.segment_size <= min(flushed, self.write_position)
            ):
                removed.append(self._segments.pop(0))
        for segment in removed:
            os.unlink(segment.path)
            self._retired.append(segment)  # closed later: a concurrent pread may still use it
        return removed

    def close_retired(self) -> None:
        """Close the segments retention removed; they stay open until now because a reader in
        another thread may still be using their descriptor."""
        retired, self._retired = self._retired, []
        for segment in retired:
            segment.close()

    def close(self) -> None:
        """Close every segment (shutdown)."""
        self.close_retired()
        with self._segments_lock:
            for segment in self._segments:
                segment.close()
