"""A bounded set of open consume-queue files, least recently used closed first.

A topic of 1,024 queues written once each would otherwise hold 1,024 descriptors for the life of
the broker, and the process's descriptor limit is shared with client connections. Files written
since the last checkpoint (*dirty*) are closed only after an ``fdatasync``: a writeback error is
reported to descriptors that were open when it happened, so closing first could hide it
(docs/storage-format.md §2). Descriptors in use by a caller or by the checkpoint's fsync are
*pinned* and never closed under their user.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict

from pocketmq.store.files import fdatasync, open_file

__all__ = ["OpenFiles", "QueueFile", "default_capacity"]

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def default_capacity() -> int:
    """A quarter of the process's descriptor limit (at least 64): the rest is for clients."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(64, soft // 4)


class QueueFile:
    """One consume-queue file; ``fd`` is -1 while it is closed. ``allocated``: bytes from its
    start known to be reserved on disk (0 until the store reserved some in this process)."""

    __slots__ = ("allocated", "base", "dirty", "doomed", "fd", "path", "pins")

    def __init__(self, path: str, base: int) -> None:
        self.path = path
        self.base = base
        self.allocated = 0
        self.fd = -1
        self.dirty = False
        self.doomed = False
        self.pins = 0


class OpenFiles:
    """The descriptors of every consume queue of a store (thread-safe)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[QueueFile, None] = OrderedDict()
        self.opened = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._open)

    def acquire(self, queue_file: QueueFile) -> int:
        """The file's descriptor, opened if needed and pinned until :meth:`release`."""
        with self._lock:
            if queue_file.fd >= 0:
                self._open.move_to_end(queue_file)
                queue_file.pins += 1
                return queue_file.fd
            self._make_room(self.capacity - 1)
            try:
                fd = open_file(queue_file.path, os.O_RDWR, "consumequeue")
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                self._make_room(len(self._open) // 2)  # the limit is lower than we thought
                fd = open_file(queue_file.path, os.O_RDWR, "consumequeue")
            self._adopt(queue_file, fd)
            queue_file.pins += 1
            return fd

    def adopt(self, queue_file: QueueFile, fd: int) -> None:
        """Take over the descriptor of a file just created (and pin it like acquire)."""
        with self._lock:
            self._make_room(self.capacity - 1)
            self._adopt(queue_file, fd)
            queue_file.pins += 1

    def shrink(self) -> None:
        """Close half of the unpinned files (the descriptor limit was hit elsewhere)."""
        with self._lock:
            self._make_room(len(self._open) // 2)

    def _adopt(self, queue_file: QueueFile, fd: int) -> None:
        queue_file.fd = fd
        self._open[queue_file] = None
        self.opened += 1

    def release(self, queue_file: QueueFile, *, wrote: bool = False) -> None:
        """Unpin a file (``wrote``: it has unsynced data for the checkpoint's fsync); a file that
        was deleted while pinned is closed now."""
        with self._lock:
            if wrote:
                queue_file.dirty = True
            queue_file.pins -= 1
            if queue_file.doomed and not queue_file.pins:
                self._close(queue_file)

    def take_dirty(self) -> list[QueueFile]:
        """Files written since the last call, pinned: fsync them, then :meth:`release_all`."""
        with self._lock:
            dirty = [f for f in self._open if f.dirty]
            for queue_file in dirty:
                queue_file.dirty = False
                queue_file.pins += 1
            return dirty

    def release_all(self, files: list[QueueFile]) -> None:
        """Unpin every file of ``files`` (a batch's prepared queue files)."""
        for queue_file in files:
            self.release(queue_file)

    def forget(self, queue_file: QueueFile) -> None:
        """The file is being deleted: close it now, or when its last user releases it."""
        with self._lock:
            queue_file.dirty = False
            if queue_file.pins:
                queue_file.doomed = True
            else:
                self._close(queue_file)

    def close_all(self) -> None:
        """Close every open file (shutdown, or a test that lowers the descriptor limit)."""
        with self._lock:
            for queue_file in list(self._open):
                self._close(queue_file)

    def _close(self, queue_file: QueueFile) -> None:
        if queue_file.fd >= 0:
            os.close(queue_file.fd)
            queue_file.fd = -1
        self._open.pop(queue_file, None)

    def _make_room(self, keep: int) -> None:
        """Close least recently used files until at most ``keep`` are open (pinned files stay
        open, so the bound is exceeded while more than ``keep`` are in use)."""
        while len(self._open) > max(0, keep):
            victim = next((f for f in self._open if not f.pins and not f.dirty), None)
            if victim is None:
                victim = next((f for f in self._open if not f.pins), None)
                if victim is None:
                    return
                fdatasync(victim.fd, "consumequeue")  # an error here is a durability failure
                victim.dirty = False
            self._close(victim)
            self.evicted += 1
