"""Damaged commit-log ranges set aside instead of dropped (docs/storage-format.md §7).

When a record fails verification, the store never cuts the log there (that would throw away
every intact record behind it). It copies the damaged bytes into ``store/quarantine/``, lists
the range in ``ranges.jsonl`` with the consume-queue entries that pointed into it (what an
operator has lost), and from then on reads and scans step over the range. The list is what
``pocketmq store check`` shows; the saved bytes are for forensics.
"""

from __future__ import annotations

import bisect
import logging
import os

import msgspec

from pocketmq.store.files import atomic_write, fsync, fsync_directory, open_file, pwrite_full

__all__ = ["LostEntry", "Quarantine", "QuarantinedRange"]

log = logging.getLogger("pocketmq.store")

RANGES_FILE = "ranges.jsonl"


class LostEntry(msgspec.Struct, frozen=True):
    """A message (queue position) whose record lies in a quarantined range."""

    topic: str
    queue_id: int
    queue_offset: int


class QuarantinedRange(msgspec.Struct, frozen=True, kw_only=True):
    """Bytes ``[start, end)`` of the commit log that failed verification.

    ``kind``: ``damaged`` (inside the log, intact records follow it), ``torn`` (a final write
    that never completed, cut off the end of the log), ``missing`` (the log ends before data
    it had confirmed durable), ``divergent`` (a replica's suffix its new master never had,
    docs/replication.md §4), or ``refetched`` (a replica's damaged range, cut off its log with
    everything after it and copied again from its master).
    """

    start: int
    end: int
    kind: str
    reason: str
    detected_at_ms: int
    saved: str = ""
    lost: list[LostEntry] = []


class Quarantine:
    """The quarantined ranges of one store, sorted by start offset."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.ranges: list[QuarantinedRange] = []
        self._starts: list[int] = []
        self._skipped: list[QuarantinedRange] = []  # "damaged" ranges: still in the log
        self._skipped_starts: list[int] = []
        path = os.path.join(directory, RANGES_FILE)
        try:
            with open(path, "rb") as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return
        decode = msgspec.json.Decoder(QuarantinedRange).decode
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                self._insert(decode(line))
            except msgspec.DecodeError as exc:  # a torn last line: the range is found again
                log.warning("%s line %d is unreadable and ignored: %s", path, number, exc)

    def remember(self, item: QuarantinedRange) -> None:
        """List ``item`` for this run only (its file could not be written)."""
        self._insert(item)

    def _insert(self, item: QuarantinedRange) -> None:
        _insert_sorted(self.ranges, self._starts, item)
        if item.kind == "damaged":
            _insert_sorted(self._skipped, self._skipped_starts, item)

    @property
    def skipping(self) -> bool:
        """Whether any range must be stepped over by reads."""
        return bool(self._skipped)

    def covering(self, offset: int) -> QuarantinedRange | None:
        """The damaged range holding ``offset`` that reads and scans step over, if any (torn
        and missing ranges were cut off the log: new records live there now)."""
        position = bisect.bisect_right(self._skipped_starts, offset) - 1
        if position >= 0 and offset < self._skipped[position].end:
            return self._skipped[position]
        return None

    def holes(self, end: int) -> list[QuarantinedRange]:
        """The damaged ranges still inside a log that ends at ``end``, oldest first."""
        return [item for item in self._skipped if item.start < end]

    def release(self, offset: int, reason: str) -> None:
        """A replica cut its log at ``offset`` to copy it again from its master: the damaged
        ranges from there on are no longer in the log (reads must not step over the records
        that take their place). Listed as ``refetched``, durably."""
        if not any(item.start >= offset for item in self._skipped):
            return
        kept = [
            msgspec.structs.replace(item, kind="refetched", reason=f"{item.reason}; {reason}")
            if item.kind == "damaged" and item.start >= offset
            else item
            for item in self.ranges
        ]
        data = b"".join(msgspec.json.encode(item) + b"\n" for item in kept)
        atomic_write(os.path.join(self.directory, RANGES_FILE), data, "quarantine")
        self.ranges, self._starts, self._skipped, self._skipped_starts = [], [], [], []
        for item in kept:
            self._insert(item)

    def add(self, item: QuarantinedRange, data: bytes = b"") -> QuarantinedRange:
        """Save ``data`` (the damaged bytes) and list ``item``, durably, before the caller acts
        on it (truncates, or reads past it)."""
        os.makedirs(self.directory, exist_ok=True)
        if data:
            name = f"{item.start:020d}-{item.end:020d}.bin"
            fd = open_file(
                os.path.join(self.directory, name),
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                "quarantine",
            )
            try:
                pwrite_full(fd, data, 0, "quarantine")
                fsync(fd, "quarantine")
            finally:
                os.close(fd)
            item = msgspec.structs.replace(item, saved=name)
        line = msgspec.json.encode(item) + b"\n"
        fd = open_file(
            os.path.join(self.directory, RANGES_FILE),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND,
            "quarantine",
        )
        try:
            os.write(fd, line)
            fsync(fd, "quarantine")
        finally:
            os.close(fd)
        fsync_directory(self.directory)
        self._insert(item)
        return item


def _insert_sorted(
    items: list[QuarantinedRange], starts: list[int], item: QuarantinedRange
) -> None:
    position = bisect.bisect_left(starts, item.start)
    if position < len(starts) and starts[position] == item.start:
        items[position] = item
        return
    starts.insert(position, item.start)
    items.insert(position, item)
