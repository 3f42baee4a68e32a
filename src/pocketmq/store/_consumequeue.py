"""Consume queues: per (topic, queue) arrays of fixed-width entries pointing into the commit log.

The n-th message of a queue is one ``pread`` at ``n × 20`` away, whatever else the log holds.
Entries are written at the record's own queue offset, so replaying the log after a crash writes
the same bytes again instead of appending duplicates. A queue offset is never given to two
messages: a position whose record was lost becomes a *hole* entry (docs/storage-format.md §2),
which readers step over, instead of being handed out again.

A file grows as its queue does (docs/storage-format.md §2): disk is reserved (``fallocate``)
ahead of the entries in steps that double from 4 KiB up to 1 MiB, so a queue holding one message
costs one 4 KiB block instead of the whole 6 MB file, and a full disk still refuses a message
before it is logged: the reservation for its entry is made first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from typing import Final

from pocketmq.store.files import allocate, open_file, pread_full, pwrite_full
from pocketmq.store.message import QueueEntry
from pocketmq.store.openfiles import OpenFiles, QueueFile

__all__ = ["ENTRY", "HOLE_TAG", "ConsumeQueue"]

ENTRY: Final[struct.Struct] = struct.Struct("<QIQ")
ENTRY_SIZE: Final = ENTRY.size
GROW_MIN: Final = 4096
"""The first reservation of a queue file (one filesystem block), and the unit of the others."""
GROW_MAX: Final = 1 << 20
"""The largest step a queue file grows by (steps double up to it)."""
HOLE_TAG: Final = 2**64 - 1
"""Tag code of a hole entry (size 0): a position whose message is gone. Non-zero, so a hole is
never mistaken for an unwritten slot."""


class ConsumeQueue:
    """One queue's entries, split over files of ``entries_per_file`` entries each."""

    def __init__(
        self,
        directory: str,
        topic: str,
        queue_id: int,
        entries_per_file: int,
        files: OpenFiles,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_file = entries_per_file
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self._cache = files
        self._files: list[QueueFile] = []
        self.max_offset = 0  # the next offset to write == number of entries, holes included
        self.min_offset = 0
        if os.path.isdir(directory):
            for name in sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20):
                self._files.append(QueueFile(os.path.join(directory, name), int(name)))
        if self._files:
            self.min_offset = self._files[0].base
            self.max_offset = self._files[0].base

    # -- files ----------------------------------------------------------------------------

    def _file_for(self, offset: int, create: bool) -> QueueFile | None:
        if self._files:
            index = (offset - self._files[0].base) // self.entries_per_file
            if 0 <= index < len(self._files):
                return self._files[index]
            if index < 0 or not create:
                return None
        elif not create:
            return None
        base = offset - offset % self.entries_per_file
        os.makedirs(self.directory, exist_ok=True)
        if self._files:
            # fill any gap so file indexes stay dense
            next_base = self._files[-1].base + self.entries_per_file
            while next_base < base:
                self._files.append(self._create(next_base))
                next_base += self.entries_per_file
        queue_file = self._create(base)
        self._files.append(queue_file)
        if len(self._files) == 1:
            self.min_offset = base
        return queue_file

    def _create(self, base: int) -> QueueFile:
        """A new, empty file: :meth:`prepare` reserves its disk as entries come (a full disk
        fails there, before any record depends on it, not on a later entry write)."""
        path = os.path.join(self.directory, f"{base:020d}")
        try:
            fd = open_file(path, os.O_RDWR | os.O_CREAT, "consumequeue")
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            self._cache.shrink()  # our own cached descriptors may be what filled the table
            fd = open_file(path, os.O_RDWR | os.O_CREAT, "consumequeue")
        queue_file = QueueFile(path, base)
        self._cache.adopt(queue_file, fd)
        self._cache.release(queue_file, wrote=True)  # its directory entry needs the checkpoint
        return queue_file

    # -- writes ---------------------------------------------------------------------------

    def prepare(self, offset: int) -> tuple[QueueFile, int]:
        """Make sure the entry at ``offset`` can be written: its file exists, is open and has
        disk reserved for it, and stays open (pinned) until :meth:`unpin`. A full disk or a
        descriptor limit thus refuses a message before it is logged, never after. Returns the
        file and the first offset past the entries made ready with it."""
        queue_file = self._file_for(offset, create=True)
        if queue_file is None:
            raise OSError(errno.EINVAL, f"queue offset {offset} lies before the queue's first file")
        fd = self._cache.acquire(queue_file)
        needed = (offset - queue_file.base + 1) * ENTRY_SIZE
        if needed > queue_file.allocated:
            try:
                self._reserve(queue_file, fd, needed)
            except BaseException:
                self._cache.release(queue_file)
                raise
        ready = queue_file.base + min(queue_file.allocated // ENTRY_SIZE, self.entries_per_file)
        return queue_file, ready

    def _reserve(self, queue_file: QueueFile, fd: int, needed: int) -> None:
        """Reserve at least ``needed`` bytes from the file's start: the next step of its growth
        (doubling from GROW_MIN up to GROW_MAX per step, never past the file's full size)."""
        have = queue_file.allocated
        size = max(needed, GROW_MIN, min(2 * have, have + GROW_MAX))
        size = min(-(-size // GROW_MIN) * GROW_MIN, self.file_bytes)
        allocate(fd, size, "consumequeue")
        queue_file.allocated = size

    def unpin(self, queue_file: QueueFile) -> None:
        """Let the cache close a file pinned by :meth:`prepare` again, once the entries are
        written."""
        self._cache.release(queue_file)

    def put(self, offset: int, entries: bytes, *, pinned: bool = False) -> None:
        """Write consecutive packed entries starting at logical ``offset``. ``pinned``: the
        caller holds the files open (:meth:`prepare`), so no cache bookkeeping is needed."""
        count = len(entries) // ENTRY_SIZE
        done = 0
        cache = self._cache
        while done < count:
            target = offset + done
            queue_file = self._file_for(target, create=True)
            assert queue_file is not None
            room = queue_file.base + self.entries_per_file - target
            chunk = min(room, count - done)
            # all of them in one file (nearly always): written without a copy
            end = (done + chunk) * ENTRY_SIZE
            data = entries if not done and end == len(entries) else entries[done * ENTRY_SIZE : end]
            position = (target - queue_file.base) * ENTRY_SIZE
            if pinned and queue_file.fd >= 0:
                pwrite_full(queue_file.fd, data, position, "consumequeue")
                queue_file.dirty = True
            else:
                fd = cache.acquire(queue_file)
                try:
                    pwrite_full(fd, data, position, "consumequeue")
                finally:
                    cache.release(queue_file, wrote=True)
            done += chunk
        if offset + count > self.max_offset:
            self.max_offset = offset + count

    def put_one(self, offset: int, physical_offset: int, size: int, tag_code: int) -> None:
        """Write a single entry (recovery's replay and the repair of a hole), without the caller
        packing it."""
        self.put(offset, ENTRY.pack(physical_offset, size, tag_code))

    def put_holes(self, offsets: list[int], physical_offset: int) -> None:
        """Mark these positions as holes (their messages are gone)."""
        hole = ENTRY.pack(physical_offset, 0, HOLE_TAG)
        for offset in offsets:
            self.put(offset, hole)

    def reserve(self, next_offset: int, physical_offset: int) -> int:
        """Make ``next_offset`` the lowest offset the next message may get, filling the gap
        with holes; returns how many holes were written."""
        gap = next_offset - self.max_offset
        if gap <= 0:
            return 0
        self.put(self.max_offset, ENTRY.pack(physical_offset, 0, HOLE_TAG) * gap)
        return gap

    # -- reads ----------------------------------------------------------------------------

    def read_raw(self, offset: int, count: int) -> bytes:
        """Packed entries from ``offset`` (fewer if the queue ends or a file boundary is hit)."""
        count = min(count, self.max_offset - offset)
        if count <= 0 or offset < self.min_offset:
            return b""
        queue_file = self._file_for(offset, create=False)
        if queue_file is None:
            return b""
        count = min(count, queue_file.base + self.entries_per_file - offset)
        fd = self._cache.acquire(queue_file)
        try:
            return pread_full(fd, count * ENTRY_SIZE, (offset - queue_file.base) * ENTRY_SIZE)
        finally:
            self._cache.release(queue_file)

    def read(self, offset: int, count: int) -> list[QueueEntry]:
        """Up to ``count`` entries from logical ``offset``, unpacked, for readers that need the
        positions."""
        raw = self.read_raw(offset, count)
        return [
            QueueEntry(queue_offset=offset + i, physical_offset=p, size=s, tag_code=t)
            for i, (p, s, t) in enumerate(ENTRY.iter_unpack(raw))
        ]

    def entry(self, offset: int) -> QueueEntry | None:
        """The entry at ``offset``, or None beyond the queue's end."""
        entries = self.read(offset, 1)
        return entries[0] if entries else None

    def offsets_between(self, start: int, end: int) -> list[int]:
        """Queue offsets whose entries point into physical ``[start, end)`` (binary search:
        physical offsets grow along a queue)."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            entry = self._entry_at(mid)
            if entry is not None and entry[0] < start:
                low = mid + 1
            else:
                high = mid
        found = []
        while low < self.max_offset:
            entry = self._entry_at(low)
            if entry is None or entry[0] >= end:
                break
            if entry[1]:
                found.append(low)
            low += 1
        return found

    # -- recovery and retention -----------------------------------------------------------

    def load(self) -> int:
        """Find how many entries the files hold (holes included) and make that the next
        offset; returns it."""
        if not self._files:
            self.max_offset = self.min_offset = 0
            return 0
        # Written entries form a prefix; the last file tells where it ends.
        last = self._files[-1]
        fd = self._cache.acquire(last)
        try:  # a file holds its entries at its start; it may be shorter than its full size
            data = pread_full(fd, min(os.fstat(fd).st_size, self.file_bytes), 0)
        finally:
            self._cache.release(last)
        used = len(data.rstrip(b"\x00"))
        self.max_offset = last.base + (used + ENTRY_SIZE - 1) // ENTRY_SIZE
        return self.max_offset

    def trim(self, log_end: int) -> list[int]:
        """Entries pointing at or past ``log_end`` (their records were cut off the log) become
        holes, so their offsets are never handed out again; returns those offsets."""
        lost: list[int] = []
        offset = self.max_offset - 1
        while offset >= self.min_offset:
            entry = self._entry_at(offset)
            if entry is None:
                break
            physical, size, _ = entry
            if size and physical + size <= log_end:
                break
            if size:
                lost.append(offset)
            offset -= 1
        if lost:
            self.put_holes(lost, log_end)
        return lost

    def cut(self, log_end: int) -> None:
        """Remove (not hole) the entries pointing at or past ``log_end``: a slave cutting a
        suffix its master never had, whose queue offsets the master's records take next."""
        offset = self.max_offset
        while offset > self.min_offset:
            entry = self._entry_at(offset - 1)
            if entry is None or (entry[1] and entry[0] + entry[1] <= log_end):
                break
            if not entry[1] and entry[0] < log_end:  # a hole made before the cut stays
                break
            offset -= 1
        if offset == self.max_offset:
            return
        self.put(offset, b"\x00" * ENTRY_SIZE * (self.max_offset - offset))
        self.max_offset = offset

    def _entry_at(self, offset: int) -> tuple[int, int, int] | None:
        raw = self.read_raw(offset, 1)
        if not raw:
            return None
        physical, size, tag = ENTRY.unpack(raw)
        return physical, size, tag

    def reset(self) -> None:
        """Forget every entry (before a rebuild from the log)."""
        for queue_file in self._files:
            self._cache.forget(queue_file)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(queue_file.path)
        self._files = []
        self.max_offset = self.min_offset = 0

    def set_min_physical(self, min_physical: int) -> None:
        """Delete files wholly below ``min_physical`` and move ``min_offset`` to the first entry
        that still points into the log."""
        while len(self._files) > 1:
            nxt = self._files[1]
            if nxt.base >= self.max_offset:
                # The next file holds no written entry yet: its zeros read as physical offset 0
                # and must not condemn this file.
                break
            first = self._entry_at(nxt.base)
            if first is None or first[0] > min_physical:
                break
            doomed = self._files.pop(0)
            self._cache.forget(doomed)
            os.unlink(doomed.path)
        if not self._files:
            return
        low = max(self._files[0].base, self.min_offset)
        high = self.max_offset
        while low < high:  # first entry with physical offset >= min_physical
            mid = (low + high) // 2
            entry = self._entry_at(mid)
            if entry is not None and entry[0] < min_physical:
                low = mid + 1
            else:
                high = mid
        self.min_offset = low

    def close(self) -> None:
        """Hand the queue's open files back to the shared descriptor cache (shutdown)."""
        for queue_file in self._files:
            self._cache.forget(queue_file)
        self._files = []

    def destroy(self) -> None:
        """Delete the queue's files and directory: its topic was deleted, or recovery found a queue
        it does not need."""
        self.reset()
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)
