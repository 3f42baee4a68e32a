"""Consume queues: per (topic, queue) arrays of fixed-width entries pointing into the commit log.

The n-th message of a queue is one ``pread`` at ``n × 20`` away, whatever else the log holds.
Entries are written at the record's own queue offset, so replaying the log after a crash writes
the same bytes again instead of appending duplicates.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import Final

from pocketmq.store.files import pread_full, pwrite_full
from pocketmq.store.message import QueueEntry

__all__ = ["ENTRY", "ConsumeQueue"]

ENTRY: Final = struct.Struct("<QIQ")
ENTRY_SIZE: Final = ENTRY.size
_ZERO_ENTRY: Final = b"\x00" * ENTRY_SIZE


class _QueueFile:
    __slots__ = ("base", "fd", "path")

    def __init__(self, path: str, base: int, fd: int) -> None:
        self.path = path
        self.base = base
        self.fd = fd


class ConsumeQueue:
    """One queue's entries, split over files of ``entries_per_file`` entries each."""

    def __init__(self, directory: str, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_file = entries_per_file
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self._files: list[_QueueFile] = []
        self.max_offset = 0  # the next offset to write == number of entries
        self.min_offset = 0
        self._dirty: set[_QueueFile] = set()
        if os.path.isdir(directory):
            for name in sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20):
                path = os.path.join(directory, name)
                self._files.append(_QueueFile(path, int(name), os.open(path, os.O_RDWR)))
        if self._files:
            self.min_offset = self._files[0].base
            self.max_offset = self._files[0].base

    # -- files ----------------------------------------------------------------------------

    def _file_for(self, offset: int, create: bool) -> _QueueFile | None:
        if self._files:
            index = (offset - self._files[0].base) // self.entries_per_file
            if 0 <= index < len(self._files):
                return self._files[index]
            if index < 0:
                return None
            if not create:
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

    def _create(self, base: int) -> _QueueFile:
        path = os.path.join(self.directory, f"{base:020d}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, self.file_bytes)
        return _QueueFile(path, base, fd)

    # -- writes ---------------------------------------------------------------------------

    def put(self, offset: int, entries: bytes) -> None:
        """Write consecutive packed entries starting at logical ``offset``."""
        count = len(entries) // ENTRY_SIZE
        done = 0
        while done < count:
            target = offset + done
            queue_file = self._file_for(target, create=True)
            assert queue_file is not None
            room = queue_file.base + self.entries_per_file - target
            chunk = min(room, count - done)
            pwrite_full(
                queue_file.fd,
                entries[done * ENTRY_SIZE : (done + chunk) * ENTRY_SIZE],
                (target - queue_file.base) * ENTRY_SIZE,
            )
            self._dirty.add(queue_file)
            done += chunk
        if offset + count > self.max_offset:
            self.max_offset = offset + count

    def put_one(self, offset: int, physical_offset: int, size: int, tag_code: int) -> None:
        self.put(offset, ENTRY.pack(physical_offset, size, tag_code))

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
        return pread_full(
            queue_file.fd, count * ENTRY_SIZE, (offset - queue_file.base) * ENTRY_SIZE
        )

    def read(self, offset: int, count: int) -> list[QueueEntry]:
        raw = self.read_raw(offset, count)
        return [
            QueueEntry(queue_offset=offset + i, physical_offset=p, size=s, tag_code=t)
            for i, (p, s, t) in enumerate(ENTRY.iter_unpack(raw))
        ]

    def entry(self, offset: int) -> QueueEntry | None:
        entries = self.read(offset, 1)
        return entries[0] if entries else None

    # -- recovery and retention -----------------------------------------------------------

    def recover(self, log_end: int, trusted_count: int | None) -> bool:
        """Find the written entries and drop those pointing at or past ``log_end``.

        Returns False when the files hold fewer entries than ``trusted_count`` (the checkpoint's
        figure): the queue was damaged and must be rebuilt from the log.
        """
        if not self._files:
            self.max_offset = self.min_offset = 0
            return not trusted_count
        # Written entries form a prefix; the last file tells where it ends.
        last = self._files[-1]
        data = pread_full(last.fd, self.file_bytes, 0)
        used = len(data.rstrip(b"\x00"))
        count = last.base + (used + ENTRY_SIZE - 1) // ENTRY_SIZE
        # Walk back over entries that point past the end of the log (a truncated tail).
        while count > self.min_offset:
            entry = self._entry_at(count - 1)
            if entry is None:
                break
            physical, size, _ = entry
            if size and physical + size <= log_end:
                break
            count -= 1
        self.max_offset = count
        self._zero_from(count)
        return trusted_count is None or count >= trusted_count

    def _entry_at(self, offset: int) -> tuple[int, int, int] | None:
        queue_file = self._file_for(offset, create=False)
        if queue_file is None:
            return None
        raw = pread_full(queue_file.fd, ENTRY_SIZE, (offset - queue_file.base) * ENTRY_SIZE)
        physical, size, tag = ENTRY.unpack(raw)
        return physical, size, tag

    def _zero_from(self, offset: int) -> None:
        """Clear every entry from ``offset`` on and delete files that start after it."""
        while self._files and self._files[-1].base > offset and len(self._files) > 1:
            doomed = self._files.pop()
            self._dirty.discard(doomed)
            os.close(doomed.fd)
            os.unlink(doomed.path)
        if not self._files:
            return
        last = self._files[-1]
        position = max(0, offset - last.base) * ENTRY_SIZE
        if position < self.file_bytes:
            os.ftruncate(last.fd, position)
            os.ftruncate(last.fd, self.file_bytes)

    def reset(self) -> None:
        """Forget every entry (before a rebuild from the log)."""
        for queue_file in self._files:
            os.close(queue_file.fd)
            os.unlink(queue_file.path)
        self._files = []
        self._dirty.clear()
        self.max_offset = self.min_offset = 0

    def set_min_physical(self, min_physical: int) -> None:
        """Delete files wholly below ``min_physical`` and move ``min_offset`` to the first entry
        that still points into the log."""
        while len(self._files) > 1:
            nxt = self._files[1]
            if nxt.base >= self.max_offset:
                # The next file holds no written entry yet (recovery may have emptied it): its
                # zeros read as physical offset 0 and must not condemn this file.
                break
            first = self._entry_at(nxt.base)
            if first is None or first[0] > min_physical:
                break
            doomed = self._files.pop(0)
            self._dirty.discard(doomed)
            os.close(doomed.fd)
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

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def take_dirty(self) -> list[int]:
        """Descriptors written since the last call (call under the store's write lock)."""
        dirty, self._dirty = self._dirty, set()
        return [queue_file.fd for queue_file in dirty]

    def close(self) -> None:
        for queue_file in self._files:
            os.close(queue_file.fd)
        self._files = []

    def destroy(self) -> None:
        self.reset()
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)
