"""The cluster's inner identity: the credential brokers, name servers and proxies show each other.

RocketMQ 5's ACL 2.0 gives the components of a cluster *inner credentials* for the links between
them; pocketmq does the same with one shared secret per cluster, the **cluster key**
(docs/security.md, "Trust inside the cluster"). A component that proves it holds the key
authenticates as :data:`CLUSTER_USER`: it may register brokers at a name server, follow a master
on the replication port, and read other brokers' figures. No user of ``pocketmq user`` can have
that name (it holds a ``/``).

The key is a text file, mode 0600, one secret per line (64 hex digits): the first line is the
one this component signs with; every line is accepted from peers, so a key can be rotated one
component at a time (``pocketmq cluster key rotate``: a new first line, the old one kept until
every component has the new file). A file that others may read is refused, as ssh refuses a
private key anyone can read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pocketmq.errors import InvalidArgumentError

__all__ = [
    "CLUSTER_KEY_FILE",
    "CLUSTER_USER",
    "ClusterKey",
    "ClusterKeyFile",
    "create_cluster_key",
    "load_cluster_key",
    "prune_cluster_key",
]

log = logging.getLogger("pocketmq.server")

CLUSTER_USER = "cluster/inner"
"""The access key a component proves the cluster key under (module doc)."""

CLUSTER_KEY_FILE = "cluster.key"
"""Its name in a data directory's ``config/`` (a broker with authentication and no key given)."""

_SECRET_HEX = 64  # 256 bits


@dataclass(frozen=True, slots=True)
class ClusterKey:
    """The cluster key as loaded: the secret to sign with, and every secret accepted from peers."""

    secrets: tuple[str, ...]
    path: str = ""

    @property
    def current(self) -> str:
        """The secret this component proves itself with (the file's first line)."""
        return self.secrets[0]

    def __repr__(self) -> str:  # never print a secret
        return f"ClusterKey(path={self.path!r}, secrets=<{len(self.secrets)}>)"


def load_cluster_key(path: str | os.PathLike[str]) -> ClusterKey:
    """Read the key at ``path``; a missing, unreadable, malformed or group/world-readable file
    is an :class:`InvalidArgumentError` naming the file and what to do."""
    where = os.fspath(path)
    try:
        info = os.stat(where)
        raw = Path(where).read_text(encoding="ascii")
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"cluster key {where} does not exist: create it with `pocketmq cluster key create "
            f"{where}` and give every broker, name server and proxy of the cluster a copy"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read the cluster key {where}: {exc}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgumentError(
            f"cluster key {where} is readable by others (mode {stat.S_IMODE(info.st_mode):o}): "
            f"`chmod 600 {where}`"
        )
    lines = tuple(line.strip() for line in raw.splitlines() if line.strip())
    if not lines or not all(_is_secret(line) for line in lines):
        raise InvalidArgumentError(
            f"cluster key {where} is malformed: expected one or more lines of {_SECRET_HEX} hex "
            "digits"
        )
    return ClusterKey(lines, where)


def create_cluster_key(
    path: str | os.PathLike[str], *, keep: Sequence[str] = (), exist_ok: bool = False
) -> ClusterKey:
    """Write a new key at ``path`` (mode 0600 from the moment it exists, whatever the umask);
    ``keep``: older secrets still accepted after the new one (a rotation). A file that exists
    is refused unless ``exist_ok``, then it is loaded instead."""
    where = os.fspath(path)
    if exist_ok and os.path.exists(where):
        return load_cluster_key(where)
    new = secrets.token_hex(_SECRET_HEX // 2)
    lines = (new, *[k for k in keep if k != new])
    _write_private(where, ("\n".join(lines) + "\n").encode("ascii"), replace=bool(keep))
    return ClusterKey(lines, where)


def prune_cluster_key(path: str | os.PathLike[str]) -> ClusterKey:
    """Keep only the key's first line (the end of a rotation: every component signs with it)."""
    key = load_cluster_key(path)
    pruned = ClusterKey(key.secrets[:1], key.path)
    _write_private(key.path, (pruned.current + "\n").encode("ascii"), replace=True)
    return pruned


class ClusterKeyFile:
    """The cluster key at ``path``, read again (at most once per ``every`` seconds) when the
    file changes, so a rotation needs no restart. A file that turns unreadable or malformed
    keeps the last good key, with one ERROR line per change of the file. A missing or bad
    file at construction is the :class:`InvalidArgumentError` of :func:`load_cluster_key`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = os.fspath(path)
        self._every = every
        self._clock = clock
        self._seen = self._stamp()
        self._key = load_cluster_key(self.path)
        self._checked = clock()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino)

    def key(self) -> ClusterKey:
        """The key now (the file's current content, or the last good one)."""
        now = self._clock()
        if now - self._checked < self._every:
            return self._key
        self._checked = now
        stamp = self._stamp()
        if stamp == self._seen:
            return self._key
        self._seen = stamp
        try:
            self._key = load_cluster_key(self.path)
        except InvalidArgumentError as exc:
            log.error("keeping the cluster key read before: %s", exc)
        else:
            log.info("cluster key %s read again (%d accepted)", self.path, len(self._key.secrets))
        return self._key


def _is_secret(line: str) -> bool:
    return len(line) == _SECRET_HEX and all(c in "0123456789abcdefABCDEF" for c in line)


def _write_private(path: str, data: bytes, *, replace: bool) -> None:
    """Create ``path`` with mode 0600 before any byte is in it; ``replace``: atomically over an
    existing file (written beside it, then renamed)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)  # a new directory: private too
    target = path + ".tmp" if replace else path
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    if replace:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise InvalidArgumentError(f"{path} exists already: refusing to overwrite a key") from None
    try:
        os.fchmod(fd, 0o600)  # the umask may have taken bits away, never added: make it exact
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if replace:
        os.replace(target, path)
