"""Epochs: which master term wrote which part of the commit log (docs/replication.md §4).

Every master term is an epoch: a number and the log offset where it began. When a broker that
was master comes back as a slave, the two lists say how much of its log the new master also has
(the *consistent point*); anything beyond was written in a term that lost its place and is cut.
The list is small (one line per term) and replaced atomically.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from pocketmq.store.files import atomic_write

__all__ = ["Epoch", "EpochLog", "consistent_point"]

log = logging.getLogger("pocketmq.store")


class Epoch(NamedTuple):
    """A master term: its number and the log offset where it began."""

    number: int
    start: int


class EpochLog:
    """The epochs of one store, oldest first (``store/epochs``: ``number start`` per line)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "epochs")
        self.entries: list[Epoch] = []
        try:
            with open(self.path) as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                log.warning("%s: ignoring an unreadable line %r", self.path, line)
                continue
            epoch = Epoch(int(parts[0]), int(parts[1]))
            if self.entries and (
                epoch.number <= self.entries[-1].number or epoch.start < self.entries[-1].start
            ):
                log.warning("%s: ignoring an out-of-order epoch %s", self.path, epoch)
                continue
            self.entries.append(epoch)

    @property
    def current(self) -> Epoch | None:
        """The newest epoch (the term this store writes in), or None for a store that never had
        one."""
        return self.entries[-1] if self.entries else None

    def begin(self, number: int, start: int) -> Epoch:
        """Record a new term starting at ``start`` (durably, before it is used)."""
        current = self.current
        if current is not None and (number <= current.number or start < current.start):
            raise ValueError(f"epoch {number} at {start} cannot follow {current}")
        epoch = Epoch(number, start)
        self._save([*self.entries, epoch])
        return epoch

    def adopt(self, entries: list[Epoch]) -> None:
        """Take the master's epochs (a slave: its log is the master's, as far as it goes)."""
        if entries != self.entries:
            self._save(list(entries))

    def truncate(self, end: int) -> None:
        """Forget the epochs that began at or after ``end`` (the log was cut there)."""
        kept = [e for e in self.entries if e.start < end]
        if kept != self.entries:
            self._save(kept)

    def _save(self, entries: list[Epoch]) -> None:
        atomic_write(self.path, "".join(f"{e.number} {e.start}\n" for e in entries).encode())
        self.entries = list(entries)


def consistent_point(mine: list[Epoch], my_end: int, theirs: list[Epoch], their_end: int) -> int:
    """How much of two logs is the same history: the end of the newest epoch both have (same
    number, same start), on the side that has less of it. -1 when they share no epoch."""
    common = {e for e in mine} & {e for e in theirs}
    if not common:
        return -1
    shared = max(common, key=lambda e: e.number)

    def end_of(entries: list[Epoch], log_end: int) -> int:
        later = [e.start for e in entries if e.number > shared.number]
        return min(later) if later else log_end

    return min(end_of(mine, my_end), end_of(theirs, their_end))
