"""Hash index files: message id and business key to physical offsets (docs/storage-format.md §3).

Memory-mapped, fixed-size files with a slot table and chained entries, so the index costs a
bounded amount of memory however many messages the store holds, and survives restarts. Lookups
return candidates only; the caller reads each record and checks its key, so a hash collision
costs a read and never a wrong answer.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import sys
import zlib
from typing import Final

from pocketmq.store.files import (
    allocate,
    fsync,
    fsync_directory,
    msync,
    open_file,
    pwrite_full,
)

log = logging.getLogger("pocketmq.store")

__all__ = ["IndexFile", "IndexService", "id_hash", "id_key", "key_hashes", "topic_key"]

INDEX_MAGIC: Final = 0x504D5149
_HEADER: Final = struct.Struct("<IIIIIQQ")  # magic, version, slots, max_entries, count, min, max
HEADER_SIZE: Final = 64
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")  # ``struct.pack_into("<Q", …)`` would look it up per call
_ENTRY: Final = struct.Struct("<IQI")  # key_hash, physical_offset, previous (+1)
ENTRY_SIZE: Final = _ENTRY.size
_COUNT_AT: Final = 16
_MAX_PHYSICAL_AT: Final = 28


def id_key(message_id: str) -> bytes:
    """The index key of a message id (prefixed so ids and business keys never collide)."""
    return b"i" + message_id.encode()


def topic_key(topic: str, key: str) -> bytes:
    """The index key of a business key within a topic (the same key in two topics is two keys)."""
    return b"k" + topic.encode() + b"#" + key.encode()


# The hashes of those keys without building them: CRC-32 runs on from a prefix's CRC
# (``crc32(b, crc32(a)) == crc32(a + b)``), so a key's hash is its text's CRC seeded with its
# prefix's. A store writes one per message id and one per business key (the attempt history:
# 32 per record), and building each key was a third of its index slot's cost
# (docs/benchmarks.md, "Broker CPU per consumed message, wall clock").
ID_HASH_SEED: Final = zlib.crc32(b"i")
"""The CRC-32 of a message id's key prefix: :func:`id_hash` is the id's CRC seeded with it
(the writer computes it inline, a call less per message)."""
_topic_seeds: dict[str, int] = {}


def id_hash(message_id: str) -> int:
    """``zlib.crc32(id_key(message_id))``, the key not built."""
    return zlib.crc32(message_id.encode(), ID_HASH_SEED)


def key_hashes(topic: str, keys: str) -> list[int]:
    """``zlib.crc32(topic_key(topic, k))`` of each space-separated key of ``keys`` (the ``KEYS``
    property), the keys not built."""
    seed = _topic_seeds.get(topic)
    if seed is None:
        seed = zlib.crc32(b"k" + topic.encode() + b"#")
        if len(_topic_seeds) > 65536:
            _topic_seeds.clear()
        _topic_seeds[topic] = seed
    crc32 = zlib.crc32
    return [crc32(key.encode(), seed) for key in keys.split()]


class _PackedSlots:
    """The slot table read and written one little-endian u32 at a time, for a big-endian host,
    where a memoryview cast to ``I`` would read the table's bytes in the wrong order."""

    def __init__(self, mm: mmap.mmap, at: int) -> None:
        self._mm = mm
        self._at = at

    def __getitem__(self, slot: int) -> int:
        value: int = _U32.unpack_from(self._mm, self._at + slot * 4)[0]
        return value

    def __setitem__(self, slot: int, value: int) -> None:
        _U32.pack_into(self._mm, self._at + slot * 4, value)

    def release(self) -> None:
        """Nothing to let go of (a memoryview's counterpart)."""


def _slot_table(mm: mmap.mmap, slots: int, little_endian: bool) -> memoryview | _PackedSlots:
    """The slot table as ``slots`` u32 values indexed in place: a memoryview of the map (one
    subscript per read or write instead of a ``struct`` call and a tuple) where the host's byte
    order is the format's."""
    if little_endian:
        return memoryview(mm)[HEADER_SIZE : HEADER_SIZE + slots * 4].cast("I")
    return _PackedSlots(mm, HEADER_SIZE)


class IndexFile:
    """One index file: ``slot_count`` chain heads and up to ``max_entries`` entries."""

    def __init__(self, path: str, *, max_entries: int, create: bool, min_physical: int = 0) -> None:
        self.path = path
        self.name = os.path.basename(path)
        if create:
            slots = max(1, max_entries // 2)
            size = HEADER_SIZE + slots * 4 + max_entries * ENTRY_SIZE
            fd = open_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, "index")
            try:
                allocate(fd, size, "index")
                pwrite_full(
                    fd,
                    _HEADER.pack(INDEX_MAGIC, 1, slots, max_entries, 0, min_physical, 0),
                    0,
                    "index",
                )
                fsync(fd, "index")
            except BaseException:
                os.close(fd)
                os.unlink(path)
                raise
        else:
            fd = open_file(path, os.O_RDWR, "index")
        try:
            if os.fstat(fd).st_size < HEADER_SIZE:
                raise ValueError(f"{path} is shorter than an index header")
            self._mm = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        magic, version, slots, max_entries, count, min_physical, max_physical = _HEADER.unpack_from(
            self._mm, 0
        )
        problem = ""
        if magic != INDEX_MAGIC or version != 1:
            problem = "is not a version-1 index file"
        elif slots < 1 or max_entries < 1 or count > max_entries:
            problem = "has an impossible header"
        elif len(self._mm) != HEADER_SIZE + slots * 4 + max_entries * ENTRY_SIZE:
            problem = "has the wrong size for its header"
        if problem:
            self._mm.close()
            raise ValueError(f"{path} {problem}")
        self.slot_count = slots
        self.max_entries = max_entries
        self.count = count
        self.min_physical = min_physical
        self.max_physical = max_physical
        self._entries_at = HEADER_SIZE + slots * 4
        self._slots = _slot_table(self._mm, slots, sys.byteorder == "little")

    @property
    def full(self) -> bool:
        """Whether the file has no room for another entry (the service then starts a new file)."""
        return bool(self.count >= self.max_entries)

    def put(self, key_hash: int, physical_offset: int) -> None:
        """Add one entry at the head of its slot's chain: a slot pointer from beyond the trusted
        entries (a crash) is treated as the end of the chain."""
        mm = self._mm
        slot_at = HEADER_SIZE + (key_hash % self.slot_count) * 4
        (head,) = _U32.unpack_from(mm, slot_at)
        number = self.count
        if head > number:  # a pointer from beyond the trusted entries: end of chain
            head = 0
        _ENTRY.pack_into(
            mm, self._entries_at + number * ENTRY_SIZE, key_hash, physical_offset, head
        )
        _U32.pack_into(mm, slot_at, number + 1)
        self.count = number + 1
        _U32.pack_into(mm, _COUNT_AT, self.count)
        if physical_offset > self.max_physical:
            self.max_physical = physical_offset
            _U64.pack_into(mm, _MAX_PHYSICAL_AT, physical_offset)

    def put_many(self, hashed: list[tuple[int, int]], start: int = 0) -> int:
        """Insert ``(key_hash, physical_offset)`` pairs from ``hashed[start]`` on, as many as the
        file has room for; the header is updated once. Returns the index of the first pair not
        taken (``len(hashed)``: all of them)."""
        end: int = min(len(hashed), start + self.max_entries - self.count)
        if start >= end:
            return start
        mm = self._mm
        slots = self._slots
        slot_count = self.slot_count
        pack_entry = _ENTRY.pack_into
        number = self.count
        at = self._entries_at + number * ENTRY_SIZE
        highest = self.max_physical
        # all of them (nearly always): no copy
        for key_hash, physical_offset in (
            hashed if not start and end == len(hashed) else hashed[start:end]
        ):
            slot = key_hash % slot_count
            head = slots[slot]
            if head > number:  # a pointer from beyond the trusted entries: end of chain
                head = 0
            pack_entry(mm, at, key_hash, physical_offset, head)
            at += ENTRY_SIZE
            number += 1
            slots[slot] = number
            if physical_offset > highest:
                highest = physical_offset
        self.count = number
        _U32.pack_into(mm, _COUNT_AT, number)
        if highest != self.max_physical:
            self.max_physical = highest
            _U64.pack_into(mm, _MAX_PHYSICAL_AT, highest)
        return end

    def lookup(self, key_hash: int, limit: int) -> list[int]:
        """Physical offsets of entries whose key hash is ``key_hash``, newest first, at most
        ``limit``; pointers outside the written entries end the walk, so a damaged file cannot
        loop."""
        mm = self._mm
        (pointer,) = _U32.unpack_from(mm, HEADER_SIZE + (key_hash % self.slot_count) * 4)
        found: list[int] = []
        bound = self.count + 1
        while 0 < pointer < bound and len(found) < limit:
            entry_hash, physical, previous = _ENTRY.unpack_from(
                mm, self._entries_at + (pointer - 1) * ENTRY_SIZE
            )
            if entry_hash == key_hash:
                found.append(physical)
            bound = pointer
            pointer = previous
        return found

    def flush(self) -> None:
        """Write the mapped pages to disk (checkpoint time): the index lags the log and is rebuilt
        from it after a crash."""
        msync(self._mm, "index")

    def close(self) -> None:
        """Unmap the file (the slot table's view first: a map with a view cannot close)."""
        if not self._mm.closed:
            self._slots.release()
            self._mm.close()


class IndexService:
    """The index files of a store, newest last."""

    def __init__(self, directory: str, max_entries: int) -> None:
        self.directory = directory
        self.max_entries = max_entries
        os.makedirs(directory, exist_ok=True)
        self.files: list[IndexFile] = []
        self.rebuild_from: int | None = None
        """Set when a damaged file was dropped: index the log again from this offset."""
        names = sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
        for position, name in enumerate(names):
            try:
                self.files.append(
                    IndexFile(os.path.join(directory, name), max_entries=0, create=False)
                )
            except (OSError, ValueError) as exc:
                # The index is derived from the log: drop this file and every newer one and
                # index the log again from the last record the older files cover.
                log.warning("index file %s is damaged (%s); rebuilding it from the log", name, exc)
                for doomed in names[position:]:
                    os.unlink(os.path.join(directory, doomed))
                fsync_directory(directory)
                self.rebuild_from = self.files[-1].max_physical + 1 if self.files else 0
                break
        self._sequence = int(names[-1]) + 1 if names else 0

    def _writable(self, physical_offset: int) -> IndexFile:
        files = self.files
        if files:
            newest = files[-1]
            if newest.count < newest.max_entries:  # ``full``'s test, without its frame
                return newest
            newest.flush()
        path = os.path.join(self.directory, f"{self._sequence:020d}")
        self._sequence += 1
        index_file = IndexFile(
            path, max_entries=self.max_entries, create=True, min_physical=physical_offset
        )
        fsync_directory(self.directory)
        self.files.append(index_file)
        return index_file

    def put(self, key: bytes, physical_offset: int) -> None:
        """Index ``key`` for the record at ``physical_offset``, in the newest file with room."""
        self._writable(physical_offset).put(zlib.crc32(key), physical_offset)

    def put_hashed(self, entries: list[tuple[int, int]]) -> None:
        """Index a batch of ``(key hash, physical_offset)`` (:func:`id_hash`,
        :func:`key_hashes`): the newest file takes what it has room for (nearly always all),
        :meth:`_writable` gives a new file for the rest."""
        files = self.files
        done = files[-1].put_many(entries) if files else 0
        while done < len(entries):
            done = self._writable(entries[done][1]).put_many(entries, done)

    def lookup(self, key: bytes, limit: int = 64) -> list[int]:
        """Candidate physical offsets for ``key``, newest first, without duplicates."""
        key_hash = zlib.crc32(key)
        seen: set[int] = set()
        result: list[int] = []
        for index_file in reversed(self.files):
            for physical in index_file.lookup(key_hash, limit):
                if physical not in seen:
                    seen.add(physical)
                    result.append(physical)
            if len(result) >= limit:
                break
        return result[:limit]

    def drop_last_for_rebuild(self) -> int | None:
        """Delete the newest file (its state after a crash is not trusted); returns the physical
        offset from which it must be rebuilt, or None when there is no index."""
        if not self.files:
            return None
        last = self.files.pop()
        last.close()
        os.unlink(last.path)
        return last.min_physical

    def reset(self) -> None:
        """Delete every index file: the index is derived data and is rebuilt from the log."""
        for index_file in self.files:
            index_file.close()
            os.unlink(index_file.path)
        self.files = []

    def delete_below(self, min_physical: int) -> None:
        """Delete files whose every entry points below ``min_physical`` (never the newest)."""
        while len(self.files) > 1 and self.files[0].max_physical < min_physical:
            doomed = self.files.pop(0)
            doomed.close()
            os.unlink(doomed.path)

    def flush(self) -> None:
        """Flush the files that can still change (the newest two); older ones are already on
        disk."""
        for index_file in self.files[-2:]:
            index_file.flush()

    def close(self) -> None:
        """Flush and unmap every file (shutdown)."""
        for index_file in self.files:
            index_file.flush()
            index_file.close()
