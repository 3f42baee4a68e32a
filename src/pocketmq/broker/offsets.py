"""Committed consumer offsets per (group, topic, queue), persisted every few seconds.

Clustering consumers commit here; the broker keeps the table in memory and persists it on an
interval, 5 s by default (docs/semantics.md, "Topics, groups, offsets"). A commit never moves an
offset backwards unless asked to (operator resets go through ``force``).

``offsets.json`` keys each entry ``group@topic@queue``, so every name that reaches this table is
checked first (pocketmq.names: no ``@``, storable length): one bad commit must not make the file
unreadable on the next start. A bad entry found there anyway is skipped (docs/storage-format.md
§10); since a group without an offset would start from its consume-from position — the newest
message for ``consume_from = last``, which would skip what arrived since — the broker is told the
file was damaged and starts such groups from the oldest message instead (redelivery, not loss).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Annotated

import msgspec

from pocketmq.broker.persist import Sink, save_json
from pocketmq.broker.statefile import StateFile
from pocketmq.errors import InvalidArgumentError
from pocketmq.names import is_storable_topic, validate_stored_topic

__all__ = ["MAX_QUEUE_ID", "OffsetManager", "parse_queue_key"]

MAX_QUEUE_ID = 2**31 - 1  # the store's limit (docs/storage-format.md §1)

_Offset = Annotated[int, msgspec.Meta(ge=0)]


def parse_queue_key(key: str) -> tuple[str, str, int] | None:
    """``group@topic@queue`` as written by the broker, or None when it is not one."""
    parts = key.split("@")
    if len(parts) != 3 or not parts[2].isdigit() or not parts[0]:
        return None
    group, topic, queue = parts
    if not is_storable_topic(topic) or not is_storable_topic(group):
        return None
    queue_id = int(queue)
    return (group, topic, queue_id) if queue_id <= MAX_QUEUE_ID else None


class OffsetManager:
    """Committed offsets (module doc), loaded leniently from ``offsets.json`` and saved every
    ``offset_persist_interval`` and on shutdown."""

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "offsets.json")
        self._offsets: dict[tuple[str, str, int], int] = {}
        state = StateFile(
            self._path,
            dict,
            "groups without a committed offset start from the oldest message (redelivered)",
        )
        for key, raw in state.mapping().items():
            parsed = parse_queue_key(key)
            if parsed is None:
                state.skip(f"entry {key[:200]!r}", "the key is not group@topic@queue", raw)
                continue
            offset = state.decode(raw, _Offset, f"entry {key!r}")
            if offset is not None:
                self._offsets[parsed] = offset
        state.finish()
        #: Whether anything was lost from offsets.json at start (see the module docstring).
        self.damaged = state.damaged
        self._dirty = False

    @staticmethod
    def check(entries: Iterable[tuple[str, int, int]]) -> None:
        """Refuse, before anything is committed, an entry that could not be stored."""
        for topic, queue_id, offset in entries:
            validate_stored_topic(topic)
            if not 0 <= queue_id <= MAX_QUEUE_ID:
                raise InvalidArgumentError(f"queue id {queue_id} is out of range")
            if offset < 0:
                raise InvalidArgumentError(f"offset {offset} must not be negative")

    def merge_file(self) -> None:
        """Take offsets.json's offsets where they are further than ours (a slave, after its
        master's metadata arrived: its own consumers' commits are kept too)."""
        self.merge(OffsetManager(os.path.dirname(self._path)).snapshot())

    def merge(self, offsets: dict[tuple[str, str, int], int]) -> None:
        """Keep, per queue, the further of ours and ``offsets`` (a commit never goes back)."""
        for key, offset in offsets.items():
            if offset > self._offsets.get(key, -1):
                self._offsets[key] = offset
                self._dirty = True

    def snapshot(self) -> dict[tuple[str, str, int], int]:
        """Every committed offset now, by (group, topic, queue): what a slave sends its master."""
        return dict(self._offsets)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed on this queue."""
        return self._offsets.get((group, topic, queue_id), -1)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Move a group's offset forward; an older commit (a late or reordered one) never moves it
        back."""
        key = (group, topic, queue_id)
        if offset > self._offsets.get(key, -1):
            self._offsets[key] = offset
            self._dirty = True

    def force(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set a group's offset, backwards too: an operator's reset (broker/resets.py)."""
        self._offsets[(group, topic, queue_id)] = offset
        self._dirty = True

    def furthest(self) -> dict[tuple[str, int], int]:
        """The largest committed offset of any group, per (topic, queue)."""
        out: dict[tuple[str, int], int] = {}
        for (_, topic, queue_id), offset in self._offsets.items():
            key = (topic, queue_id)
            out[key] = max(out.get(key, 0), offset)
        return out

    def slowest(self, topic: str, queue_id: int) -> int:
        """The smallest committed offset any group has on this queue, or -1."""
        found = [o for (g, t, q), o in self._offsets.items() if t == topic and q == queue_id]
        return min(found) if found else -1

    def forget_group(self, group: str) -> None:
        """Drop a deleted group's offsets."""
        for key in [k for k in self._offsets if k[0] == group]:
            del self._offsets[key]
            self._dirty = True

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's offsets in every group."""
        for key in [k for k in self._offsets if k[1] == topic]:
            del self._offsets[key]
            self._dirty = True

    def persist(self, force: bool = False, sink: Sink | None = None) -> None:
        """Save ``offsets.json`` when something changed (or ``force``), or hand the bytes to
        ``sink`` to be written off the event loop."""
        if not (self._dirty or force):
            return
        self._dirty = False
        snapshot = {f"{g}@{t}@{q}": o for (g, t, q), o in sorted(self._offsets.items())}
        save_json(self._path, snapshot, sink)
