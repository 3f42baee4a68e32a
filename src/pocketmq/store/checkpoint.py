"""The checkpoint: how far the log is known durable and dispatched (storage-format §4).

JSON for humans reading a broken data directory at 3 a.m., a CRC so a torn write is detected,
and an atomic replace so there is always one complete version on disk.
"""

from __future__ import annotations

import contextlib
import os
import zlib

import msgspec

from pocketmq.store.files import atomic_write

__all__ = ["Checkpoint", "read_checkpoint", "write_checkpoint"]


class Checkpoint(msgspec.Struct, frozen=True):
    version: int = 1
    commitlog_flushed: int = 0
    dispatched: int = 0
    queues: dict[str, int] = {}
    written_at_ms: int = 0


def write_checkpoint(path: str, checkpoint: Checkpoint) -> None:
    body = msgspec.json.encode(checkpoint)
    atomic_write(path, body + b"\n" + f"{zlib.crc32(body):08x}\n".encode())


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


def remove_checkpoint(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
