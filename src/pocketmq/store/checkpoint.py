"""The checkpoint and the flush marker: how far the log is known durable and dispatched
(docs/storage-format.md §4).

The checkpoint is JSON for humans reading a broken data directory at 3 a.m., with a CRC so a torn
write is detected, replaced atomically so there is always one complete version on disk, and
written at most once a second. The flush marker is its fast companion: 16 bytes rewritten in place
after every successful fsync of the log, without an fsync of its own, so after a process crash
recovery knows exactly which records were acknowledged as durable, not only those older than the
last checkpoint.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from typing import Final

import msgspec

from pocketmq.store.files import atomic_write, open_file, pwrite_full

__all__ = ["Checkpoint", "FlushMarker", "read_checkpoint", "read_flush_marker", "write_checkpoint"]

log = logging.getLogger("pocketmq.store")

_MARKER: Final = struct.Struct("<QII")  # flushed position, CRC-32 of it, magic
_MARKER_MAGIC: Final = 0x504D5146


class Checkpoint(msgspec.Struct, frozen=True):
    """How far the log is flushed and dispatched, and each queue's trusted end: where recovery
    starts, so a restart verifies the tail instead of the whole log (docs/storage-format.md §4)."""

    version: int = 1
    commitlog_flushed: int = 0
    dispatched: int = 0
    queues: dict[str, int] = {}
    written_at_ms: int = 0


def write_checkpoint(path: str, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint atomically, with a CRC line, so a crash mid-write leaves the previous
    complete version and a torn one is recognised."""
    body = msgspec.json.encode(checkpoint)
    atomic_write(path, body + b"\n" + f"{zlib.crc32(body):08x}\n".encode(), "checkpoint")


def read_checkpoint(path: str) -> Checkpoint | None:
    """The checkpoint, or None when it is missing, torn or of another version."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    body, _, rest = data.partition(b"\n")
    try:
        if int(rest.strip(), 16) != zlib.crc32(body):
            return None
        checkpoint = msgspec.json.decode(body, type=Checkpoint)
    except (ValueError, msgspec.DecodeError):
        return None
    return checkpoint if checkpoint.version == 1 else None


def _pack_marker(position: int) -> bytes:
    raw = struct.pack("<Q", position)
    return _MARKER.pack(position, zlib.crc32(raw), _MARKER_MAGIC)


def read_flush_marker(path: str) -> int | None:
    """The last flushed position the marker recorded, or None when missing or damaged."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MARKER.size)
    except FileNotFoundError:
        return None
    if len(data) != _MARKER.size:
        return None
    position, crc, magic = _MARKER.unpack(data)
    if magic != _MARKER_MAGIC or crc != zlib.crc32(struct.pack("<Q", position)):
        return None
    return int(position)


class FlushMarker:
    """Writes the flushed position after each fsync (page cache only: see the module doc)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1
        self._failed = False

    def write(self, position: int) -> None:
        """Record ``position`` as flushed; a failure is logged once and otherwise ignored, because
        the marker is advisory and recovery falls back to the checkpoint."""
        try:
            if self._fd < 0:
                self._fd = open_file(self.path, os.O_WRONLY | os.O_CREAT, "marker")
            pwrite_full(self._fd, _pack_marker(position), 0, "marker")
        except OSError as exc:
            # Advisory only: recovery falls back to the checkpoint, which is more cautious.
            if not self._failed:
                log.warning("cannot update the flush marker %s: %s", self.path, exc)
            self._failed = True

    def close(self) -> None:
        """Release the marker's descriptor (shutdown)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
