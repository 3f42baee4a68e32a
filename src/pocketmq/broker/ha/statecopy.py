"""The state a master copies to its slaves, and what a slave hands back (docs/replication.md §5).

The commit log is replicated byte for byte; the broker's state files are not in it. A master
sends them whole (they are small) every few seconds and whenever topics or groups change; a
slave writes them into its own ``config/`` and reloads topics, groups and offsets, keeping the
rest on disk for the day it is promoted. The other way round, a slave that served consumers
while its master was away sends back what they did — committed offsets and, when it served
pops, its pop state — so the master does not deliver again what was acknowledged there.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pocketmq.broker.groups import GroupManager
from pocketmq.broker.offsets import OffsetManager, parse_queue_key
from pocketmq.broker.pop_state import PopManager
from pocketmq.broker.topics import TopicManager
from pocketmq.store.files import atomic_write

__all__ = ["STATE_FILES", "StateCopy"]

STATE_FILES = (
    "topics.json",
    "groups.json",
    "offsets.json",
    "pop.json",
    "schedule.json",
    "transactions.json",
    "redrive.json",
)
"""The state files a master copies to its slaves (docs/storage-format.md §10)."""


class StateCopy:
    """Reads, applies and merges copies of one broker's state files."""

    def __init__(
        self,
        config_dir: str,
        *,
        topics: TopicManager,
        groups: GroupManager,
        offsets: OffsetManager,
        pop_state: PopManager,
        is_slave: Callable[[], bool],
    ) -> None:
        self._dir = config_dir
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._pop_state = pop_state
        self._is_slave = is_slave

    def files(self) -> dict[str, bytes]:
        """A master: the state files as they are on disk now, for a slave."""
        files: dict[str, bytes] = {}
        for name in STATE_FILES:
            try:
                with open(os.path.join(self._dir, name), "rb") as handle:
                    files[name] = handle.read()
            except FileNotFoundError:
                continue
        return files

    def apply(self, files: dict[str, bytes]) -> bool:
        """A slave: take its master's state files (only those that differ are written).
        Topics and groups are the master's; offsets are merged (consumers reading from this
        slave may have committed further). Returns whether topics or groups changed: the name
        server should hear of it."""
        if not self._is_slave():
            return False
        changed: set[str] = set()
        for name, data in files.items():
            if name not in STATE_FILES:
                continue
            path = os.path.join(self._dir, name)
            try:
                with open(path, "rb") as handle:
                    if handle.read() == data:
                        continue
            except FileNotFoundError:
                pass
            if name == "offsets.json":
                self._offsets.persist(force=True)  # our own commits first, then merged
            atomic_write(path, data)
            changed.add(name)
        if "topics.json" in changed:
            self._topics.reload()
        if "groups.json" in changed:
            self._groups.reload()
        if "offsets.json" in changed:
            self._offsets.merge_file()
        return bool(changed & {"topics.json", "groups.json"})

    def handed_back(self, *, acted: bool) -> tuple[dict[str, int], bytes]:
        """A slave: its committed offsets (``group@topic@queue`` keys) and, if it served pops
        while its master was away (``acted``), its pop state."""
        offsets = {f"{g}@{t}@{q}": o for (g, t, q), o in self._offsets.snapshot().items()}
        return offsets, self._pop_state.encode() if acted else b""

    def take_back(
        self, offsets: dict[str, int], pop_state: bytes, limit: Callable[[str, int], int]
    ) -> list[str]:
        """A master: what a slave's consumers did while it served them — offsets further than
        ours, and the pop state of queues the slave moved further (docs/replication.md §5).
        ``limit(topic, queue)``: the queue's end here; an offset beyond it is refused, not
        clamped (a slave holds a copy of this log, so its consumers never read further: such
        an offset is not a consumer's). Returns what was refused (``group@topic@queue``)."""
        parsed = {}
        refused = []
        for key, offset in offsets.items():
            queue = parse_queue_key(key)
            if queue is None or offset < 0:
                continue
            if offset > limit(queue[1], queue[2]):
                refused.append(key)
                continue
            parsed[queue] = offset
        self._offsets.merge(parsed)
        if pop_state:
            refused += self._pop_state.merge(pop_state, limit)
        return refused
