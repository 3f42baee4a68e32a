"""Committed consumer offsets per (group, topic, queue), persisted every few seconds.

Clustering consumers commit here (seed 000: the broker keeps the table in memory and persists it
on an interval, 5 s by default). A commit never moves an offset backwards unless asked to
(operator resets go through ``reset``).
"""

from __future__ import annotations

import os

from pocketmq.broker.persist import Sink, load_json, save_json

__all__ = ["OffsetManager"]


class OffsetManager:
    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "offsets.json")
        raw = load_json(self._path, dict[str, int], {})
        self._offsets: dict[tuple[str, str, int], int] = {}
        for key, offset in raw.items():
            group, topic, queue = key.split("@")
            self._offsets[(group, topic, int(queue))] = offset
        self._dirty = False

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed on this queue."""
        return self._offsets.get((group, topic, queue_id), -1)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic, queue_id)
        if offset > self._offsets.get(key, -1):
            self._offsets[key] = offset
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

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._offsets[(group, topic, queue_id)] = offset
        self._dirty = True

    def forget_group(self, group: str) -> None:
        for key in [k for k in self._offsets if k[0] == group]:
            del self._offsets[key]
            self._dirty = True

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._offsets if k[1] == topic]:
            del self._offsets[key]
            self._dirty = True

    def persist(self, force: bool = False, sink: Sink | None = None) -> None:
        if not (self._dirty or force):
            return
        self._dirty = False
        snapshot = {f"{g}@{t}@{q}": o for (g, t, q), o in sorted(self._offsets.items())}
        save_json(self._path, snapshot, sink)
