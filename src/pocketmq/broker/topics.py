"""Topics: queue count, read/write permission and type, persisted in ``config/topics.json``.

Topics are created explicitly (``pocketmq topic create``); only the broker's own system topics
(retry, dead letter, schedule, transaction) are created on demand.
"""

from __future__ import annotations

import enum
import os
import re

import msgspec

from pocketmq.broker.persist import load_json, save_json
from pocketmq.errors import InvalidArgumentError, TopicNotFoundError

__all__ = [
    "PERM_READ",
    "PERM_WRITE",
    "SYSTEM_PREFIXES",
    "TopicConfig",
    "TopicManager",
    "TopicType",
    "dlq_topic",
    "retry_topic",
]

PERM_READ = 4
PERM_WRITE = 2
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, "%SYS%")
_NAME = re.compile(r"[A-Za-z0-9_\-|%]{1,127}")


class TopicType(enum.Enum):
    NORMAL = "normal"
    FIFO = "fifo"
    DELAY = "delay"
    TRANSACTION = "transaction"


class TopicConfig(msgspec.Struct, frozen=True):
    name: str
    queues: int = 8
    perm: int = PERM_READ | PERM_WRITE
    topic_type: TopicType = TopicType.NORMAL
    system: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def validate_name(kind: str, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} must be 1-127 characters of letters, digits, '_', '-' or '|'"
        )
    if name.startswith(SYSTEM_PREFIXES):
        raise InvalidArgumentError(f"{kind} name {name!r} uses a reserved prefix")


class TopicManager:
    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "topics.json")
        loaded = load_json(self._path, list[TopicConfig], [])
        self._topics: dict[str, TopicConfig] = {t.name: t for t in loaded}

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def require(self, name: str) -> TopicConfig:
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFoundError(
                f"topic {name!r} does not exist; create it with `pocketmq topic create {name}`"
            )
        return topic

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def create(
        self,
        name: str,
        *,
        queues: int,
        topic_type: TopicType = TopicType.NORMAL,
        perm: int = PERM_READ | PERM_WRITE,
        system: bool = False,
    ) -> TopicConfig:
        """Create or update a topic (queues may grow; shrinking hides the extra queues)."""
        if not system:
            validate_name("topic", name)
        if not 1 <= queues <= 1024:
            raise InvalidArgumentError("queue count must be between 1 and 1024")
        if perm & ~(PERM_READ | PERM_WRITE):
            raise InvalidArgumentError("permission must combine 4 (read) and 2 (write)")
        topic = TopicConfig(
            name=name, queues=queues, perm=perm, topic_type=topic_type, system=system
        )
        if self._topics.get(name) != topic:
            self._topics[name] = topic
            self._save()
        return topic

    def ensure_system(self, name: str, queues: int, perm: int) -> TopicConfig:
        topic = self._topics.get(name)
        if topic is None:
            topic = self.create(name, queues=queues, perm=perm, system=True)
        return topic

    def delete(self, name: str) -> bool:
        if self._topics.pop(name, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        save_json(self._path, self.all())
