"""Small JSON state files (topics, groups, offsets, pop state), replaced atomically.

JSON because an operator may need to read them during an incident; atomic replacement because a
crash while saving must leave the previous version intact; mode 0600 in 0700 directories from
their creation, because they are the broker's alone (docs/security.md, "Files"). Reading them
back is broker/statefile.py's job: leniently, entry by entry (docs/storage-format.md §10).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable
from typing import Any

import msgspec

from pocketmq.store.files import atomic_write, make_private_directories

__all__ = ["OffLoopWriter", "Sink", "private_directory", "save_json", "write_files"]

Sink = Callable[[tuple[str, bytes]], None]


def save_json(path: str, value: Any, sink: Sink | None = None) -> None:
    """Encode ``value`` now; write it now, or hand ``(path, bytes)`` to ``sink`` so the
    broker can do the writing (and its fsyncs) off the event loop."""
    data = msgspec.json.format(msgspec.json.encode(value), indent=1)
    if sink is not None:
        sink((path, data))
        return
    write_files([(path, data)])


def write_files(files: list[tuple[str, bytes]]) -> None:
    """Write each state file atomically (creating its directory), so a crash leaves the previous
    version of any file it interrupts; each is 0600 from its creation (secrets too)."""
    for path, data in files:
        make_private_directories(os.path.dirname(path))
        atomic_write(path, data)


def private_directory(path: str) -> str | None:
    """Make ``path`` private to the broker's user: created 0700 when missing, and an existing
    directory that its group or other users may enter or list loses that access. Returns what
    the log should say when it was open to others (None when it was private already)."""
    make_private_directories(path)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if not mode & 0o077:
        return None
    try:
        os.chmod(path, mode & 0o700)
    except OSError as exc:
        return f"{path} is open to other users (mode {mode:o}) and cannot be narrowed: {exc}"
    return f"{path} was open to other users (mode {mode:o}); narrowed to {mode & 0o700:o}"


class OffLoopWriter:
    """Writes batches of state files in a worker thread so their fsyncs never stall the event
    loop. ``drain`` waits for a write still running (even one whose caller was cancelled), so
    a final synchronous save on shutdown cannot be overtaken by an older snapshot."""

    def __init__(self) -> None:
        self._pending: asyncio.Future[None] | None = None

    async def write(self, files: list[tuple[str, bytes]]) -> None:
        """Write ``files`` in a worker thread after any earlier write finished (so an older snapshot
        never lands last); shielded, so a cancelled caller does not cancel the write."""
        if not files:
            return
        await self.drain()
        self._pending = asyncio.ensure_future(asyncio.to_thread(write_files, files))
        await asyncio.shield(self._pending)

    async def drain(self) -> None:
        """Wait for the write in progress, if any (before a final synchronous save)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            with contextlib.suppress(Exception):  # the writer's caller logged it already
                await pending
