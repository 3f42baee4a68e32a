"""Dead-letter redrive: put messages from ``%DLQ%<group>`` back into circulation, once each.

The operator picks messages (the CLI filters by key, tag or time); the broker re-sends each one
with its original message id, either to its original topic (every group subscribed sees it again;
consumers deduplicate by id) or to the group's retry topic (only the failing group sees it). Every
redrive is written to the audit topic ``%SYS%REDRIVE`` (keyed by group) and remembered in
``config/redrive.json``, so running the same redrive twice resends nothing twice.
"""

from __future__ import annotations

import os

import msgspec

from pocketmq.broker.persist import load_json, save_json

__all__ = ["REDRIVE_AUDIT_TOPIC", "RedriveLedger", "RedriveRecord"]

REDRIVE_AUDIT_TOPIC = "%SYS%REDRIVE"


class RedriveRecord(msgspec.Struct, frozen=True):
    group: str
    dlq_offset: int
    message_id: str
    target_topic: str
    target_queue_id: int
    target_offset: int
    operator: str
    at_ms: int


class RedriveLedger:
    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "redrive.json")
        raw = load_json(self._path, dict[str, list[int]], {})
        self._done: dict[str, set[int]] = {group: set(offsets) for group, offsets in raw.items()}

    def done(self, group: str, dlq_offset: int) -> bool:
        return dlq_offset in self._done.get(group, set())

    def mark(self, group: str, offsets: list[int]) -> None:
        self._done.setdefault(group, set()).update(offsets)
        save_json(self._path, {g: sorted(o) for g, o in self._done.items()})

    def offsets(self, group: str) -> set[int]:
        return set(self._done.get(group, set()))
