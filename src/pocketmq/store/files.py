"""Small file primitives the store builds on: full writes, zero-tolerant reads, atomic replace.

They hide the partial-write and short-read cases of the system calls so the rest of the store
never has to remember them.
"""

from __future__ import annotations

import errno
import os

__all__ = ["allocate", "atomic_write", "fsync_directory", "pread_full", "pwrite_full"]


def pwrite_full(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (``os.pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(errno.EIO, "pwrite wrote nothing")
        view = view[written:]
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


def allocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes of disk for the file so later writes cannot hit a full disk."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            os.ftruncate(fd, size)  # filesystem without fallocate: best effort
        else:
            raise


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_full(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path) or ".")
