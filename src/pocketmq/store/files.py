"""Small file primitives the store builds on: full writes, zero-tolerant reads, atomic replace.

They hide the partial-write and short-read cases of the system calls so the rest of the store
never has to remember them, and they are the one place where a test can make a system call fail
(:mod:`pocketmq.store.faults`): every write, fsync, allocation and open of the store goes
through here. ``target`` names the kind of file for fault rules and error messages.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Callable

from pocketmq.store import faults

__all__ = [
    "PRIVATE_DIRECTORY",
    "PRIVATE_FILE",
    "SyncError",
    "allocate",
    "atomic_write",
    "fdatasync",
    "fsync",
    "fsync_directory",
    "make_private_directories",
    "msync",
    "open_file",
    "pread_full",
    "pwrite_full",
]


PRIVATE_FILE = 0o600
"""The mode of every file the broker creates in its data directory: its messages, state and
secrets are for the broker's user alone (docs/security.md, "Files")."""
PRIVATE_DIRECTORY = 0o700
"""The mode of the directories it creates there."""


class SyncError(OSError):
    """An fsync, fdatasync or msync failed: data written before it may never reach the disk,
    and Linux reports such an error only once, so the store must stop acknowledging writes
    (docs/storage-format.md §5)."""


def _sync(call: Callable[[], None], target: str) -> None:
    try:
        _check("fsync", target)
        call()
    except OSError as exc:
        raise SyncError(exc.errno, f"{target}: {exc.strerror or exc}") from exc


def _check(op: str, target: str) -> None:
    injector = faults._installed
    if injector is not None:
        injector.check(op, target)


def open_file(path: str, flags: int, target: str, mode: int = PRIVATE_FILE) -> int:
    """``os.open`` (EMFILE and ENOSPC come from here); a file it creates is at most ``mode``
    (the umask may narrow it further)."""
    _check("open", target)
    return os.open(path, flags, mode)


def pwrite_full(
    fd: int, data: bytes | bytearray | memoryview, offset: int, target: str = ""
) -> None:
    """Write all of ``data`` at ``offset`` (``os.pwrite`` may write less than asked)."""
    injector = faults._installed  # _check's test, without its frame: two writes per lone send
    if injector is not None:
        injector.check("write", target)
    rest = data  # nearly always written whole by the first call: a view only for a short one
    while rest:
        written = os.pwrite(fd, rest, offset)
        if written == len(rest):
            return
        if written <= 0:
            raise OSError(errno.EIO, "pwrite wrote nothing")
        rest = memoryview(rest)[written:]
        offset += written


def pread_full(fd: int, size: int, offset: int) -> bytes:
    """Read ``size`` bytes at ``offset``; bytes past the end of the file read as zeros."""
    data = os.pread(fd, size, offset)
    if len(data) == size:
        return data
    chunks = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            chunks.append(b"\x00" * (size - got))
            break
        chunks.append(more)
        got += len(more)
    return b"".join(chunks)


def fdatasync(fd: int, target: str) -> None:
    """``os.fdatasync``; raises :class:`SyncError`."""
    _sync(lambda: os.fdatasync(fd), target)


def fsync(fd: int, target: str) -> None:
    """``os.fsync``; raises :class:`SyncError`."""
    _sync(lambda: os.fsync(fd), target)


def msync(mapping: mmap.mmap, target: str) -> None:
    """Write a memory-mapped file's dirty pages to disk; raises :class:`SyncError`."""
    _sync(mapping.flush, target)


def allocate(fd: int, size: int, target: str = "") -> None:
    """Reserve the first ``size`` bytes of the file on disk so later writes there cannot hit a
    full disk (the file grows to ``size`` if it is shorter; it never shrinks)."""
    _check("allocate", target)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # filesystem without fallocate: best effort
        else:
            raise


def fsync_directory(path: str) -> None:
    """Make a file creation, rename or deletion in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd, "directory")
    finally:
        os.close(fd)


def make_private_directories(path: str) -> None:
    """Create ``path`` and its missing parents with mode 0700 whatever the umask (``mkdir`` never
    makes them wider, the ``chmod`` makes them exactly that); existing ones are left alone."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIRECTORY)
        except FileExistsError:
            continue  # made meanwhile by another writer
        os.chmod(directory, PRIVATE_DIRECTORY)


def atomic_write(path: str, data: bytes, target: str = "state", mode: int = PRIVATE_FILE) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content. The
    new file has ``mode`` from its creation, whatever the umask: an exclusive create (a leftover
    temporary file of a crash, which may be wider, is removed first) and an ``fchmod`` before
    the first byte, so no reader ever finds the content under a wider mode."""
    tmp = path + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, target, mode)
    try:
        os.fchmod(fd, mode)
        pwrite_full(fd, data, 0, target)
        fsync(fd, target)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path) or ".")
