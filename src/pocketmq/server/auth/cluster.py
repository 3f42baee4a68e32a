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
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pocketmq.errors import InvalidArgumentError

__all__ = ["CLUSTER_USER", "ClusterKey", "create_cluster_key", "load_cluster_key"]

CLUSTER_USER = "cluster/inner"
"""The access key a component proves the cluster key under (module doc)."""

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


def _is_secret(line: str) -> bool:
    return len(line) == _SECRET_HEX and all(c in "0123456789abcdefABCDEF" for c in line)


def _write_private(path: str, data: bytes, *, replace: bool) -> None:
    """Create ``path`` with mode 0600 before any byte is in it; ``replace``: atomically over an
    existing file (written beside it, then renamed)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
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
