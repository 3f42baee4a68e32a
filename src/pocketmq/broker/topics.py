"""Topics: queue count, read/write permission and type, persisted in ``config/topics.json``.

Topics are created explicitly (``pocketmq topic create``); only the broker's own system topics
(retry, dead letter, schedule, transaction) are created on demand.

Deleting a topic takes several steps (a tombstone in the log, its queues, offsets and pop state,
its entry here), so it starts by marking the entry ``"deleting": true`` — one atomic write of
this file — and ends by removing it. A topic so marked is gone for every reader; a broker that
finds one at start (a crash came in between) finishes the delete (broker/catalog.py).
"""

from __future__ import annotations

import enum
import os

import msgspec

from pocketmq.broker.persist import save_json
from pocketmq.broker.statefile import StateFile
from pocketmq.errors import InvalidArgumentError, PreconditionFailedError, TopicNotFoundError
from pocketmq.names import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    SYSTEM_PREFIXES,
    is_storable_topic,
    validate_topic_name,
)

__all__ = [
    "DLQ_PREFIX",
    "PERM_READ",
    "PERM_WRITE",
    "RETRY_PREFIX",
    "SYSTEM_PREFIXES",
    "TopicConfig",
    "TopicManager",
    "TopicType",
    "describe",
    "differences",
    "dlq_topic",
    "retry_topic",
]

PERM_READ = 4
PERM_WRITE = 2
MAX_QUEUES = 1024
"""Queues of one topic on one broker (docs/operations.md, "Disk use"): RocketMQ sets no hard
limit, its own benchmark topic has 1,024; each queue is a directory with at least one 4 KiB
file, one more entry in every route and rebalance, and one more file descriptor while in use."""


class TopicType(enum.Enum):
    """What a topic accepts (docs/semantics.md, "Messages"); a normal topic accepts every message
    type."""

    NORMAL = "normal"
    FIFO = "fifo"
    DELAY = "delay"
    TRANSACTION = "transaction"


class TopicConfig(msgspec.Struct, frozen=True):
    """A topic's definition: queues, permission and type; ``system`` marks the broker's own topics,
    which users cannot delete."""

    name: str
    queues: int = 8
    perm: int = PERM_READ | PERM_WRITE
    topic_type: TopicType = TopicType.NORMAL
    system: bool = False

    @property
    def readable(self) -> bool:
        """Whether consumers may read the topic (a dead-letter topic is not readable)."""
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        """Whether producers may send to the topic."""
        return bool(self.perm & PERM_WRITE)


class _Entry(TopicConfig, frozen=True):
    """An entry of topics.json as stored: a topic, or one being deleted (module docstring)."""

    deleting: bool = False


def _plain(entry: TopicConfig) -> TopicConfig:
    return TopicConfig(entry.name, entry.queues, entry.perm, entry.topic_type, entry.system)


def describe(topic: TopicConfig) -> str:
    """``"8 queues, type normal, perm rw"``: a topic's settings as errors and the CLI name them."""
    perm = ("r" if topic.readable else "-") + ("w" if topic.writable else "-")
    return f"{topic.queues} queues, type {topic.topic_type.value}, perm {perm}"


def differences(old: TopicConfig, new: TopicConfig) -> list[str]:
    """What ``new`` changes in ``old``: ``["queues 8 -> 2", "type normal -> fifo"]``."""
    changed = []
    if old.queues != new.queues:
        changed.append(f"queues {old.queues} -> {new.queues}")
    if old.topic_type != new.topic_type:
        changed.append(f"type {old.topic_type.value} -> {new.topic_type.value}")
    if old.perm != new.perm:
        changed.append(f"perm {old.perm} -> {new.perm}")
    return changed


def retry_topic(group: str) -> str:
    """The topic a group's retries go through."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """The topic a group's dead letters go to."""
    return DLQ_PREFIX + group


class TopicManager:
    """The broker's topics, loaded leniently from ``topics.json`` (a bad entry is skipped, not
    fatal) and saved on every change."""

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "topics.json")
        self._topics: dict[str, TopicConfig] = {}
        self._deleting: dict[str, TopicConfig] = {}
        state = StateFile(
            self._path,
            list,
            "its topics must be created again (`pocketmq topic create`); their messages are "
            "kept in the store and readable again once the topic exists",
        )
        for number, raw in enumerate(state.items()):
            entry = state.decode(raw, _Entry, f"topic #{number}", self._entry_problem)
            if entry is None:
                continue
            if entry.name in self._topics or entry.name in self._deleting:
                state.skip(f"topic #{number}", f"a second entry for {entry.name!r}", raw)
            elif entry.deleting:
                self._deleting[entry.name] = _plain(entry)
            else:
                self._topics[entry.name] = _plain(entry)
        state.finish()

    def reload(self) -> None:
        """Read topics.json again (a slave, after its master's metadata arrived)."""
        again = TopicManager(os.path.dirname(self._path))
        self._topics, self._deleting = again._topics, again._deleting

    def get(self, name: str) -> TopicConfig | None:
        """The topic named ``name``, or None."""
        return self._topics.get(name)

    def require(self, name: str) -> TopicConfig:
        """The topic named ``name``; an unknown topic is an error that says how to create it."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFoundError(
                f"topic {name!r} does not exist; create it with `pocketmq topic create {name}`"
            )
        return topic

    def all(self) -> list[TopicConfig]:
        """Every topic, sorted by name (listings, registration with the name server)."""
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
        """Create a topic; creating it again with the same settings changes nothing. One that
        exists with other settings is refused, naming the difference: changing a topic is
        :meth:`update`'s (``pocketmq topic update``), which guards the messages in queues it
        would drop (issue 29 item 13: a create that shrank 8 queues to 2 hid 11 messages)."""
        if not system:
            validate_topic_name(name)
        if name in self._deleting:
            raise InvalidArgumentError(
                f"topic {name!r} is still being deleted (its delete could not be finished yet: "
                f"see the broker's log); delete it again, then create it"
            )
        topic = TopicConfig(
            name=name, queues=queues, perm=perm, topic_type=topic_type, system=system
        )
        problem = self._problem(topic)
        if problem is not None:
            raise InvalidArgumentError(problem)
        existing = self._topics.get(name)
        if existing == topic:
            return topic
        if existing is not None:
            options = f"--queues {queues}" if existing.queues != queues else ""
            if existing.topic_type != topic_type:
                options = f"{options} --type {topic_type.value}".strip()
            raise PreconditionFailedError(
                f"topic {name!r} exists with {describe(existing)}; this asks for "
                f"{', '.join(differences(existing, topic))}: nothing was changed. To change it: "
                f"`pocketmq topic update {name} {options}`".rstrip()
                + " (it refuses to drop queues holding unconsumed messages)"
            )
        self._topics[name] = topic
        self._save()
        return topic

    def check(self, topic: TopicConfig) -> None:
        """Refuse a definition that could not be stored (InvalidArgumentError saying why)."""
        problem = self._problem(topic)
        if problem is not None:
            raise InvalidArgumentError(problem)

    def update(self, topic: TopicConfig) -> TopicConfig:
        """Replace an existing topic's definition (checked like a new one); the caller decided
        that what the change costs is acceptable (broker/catalog.py, ``update_topic``)."""
        self.require(topic.name)
        self.check(topic)
        if self._topics[topic.name] != topic:
            self._topics[topic.name] = topic
            self._save()
        return topic

    @staticmethod
    def _problem(topic: TopicConfig) -> str | None:
        """What makes ``topic`` unacceptable (on creation and in topics.json), or None."""
        if not is_storable_topic(topic.name):
            return f"topic name {topic.name!r} cannot be stored (1-127 of [A-Za-z0-9_%|-])"
        if not topic.system and topic.name.startswith(SYSTEM_PREFIXES):
            return f"topic name {topic.name!r} uses a reserved prefix"
        if not 1 <= topic.queues <= MAX_QUEUES:
            return (
                f"topic {topic.name!r} cannot have {topic.queues} queues: a topic has 1 to "
                f"{MAX_QUEUES} queues on a broker (more brokers give it more)"
            )
        if topic.perm & ~(PERM_READ | PERM_WRITE):
            return "permission must combine 4 (read) and 2 (write)"
        return None

    @classmethod
    def _entry_problem(cls, entry: _Entry) -> str | None:
        return cls._problem(entry)

    def ensure_system(self, name: str, queues: int, perm: int) -> TopicConfig:
        """The broker's own topic ``name``, created on first use (retry and dead-letter topics,
        internal ledgers)."""
        topic = self._topics.get(name)
        if topic is None:
            topic = self.create(name, queues=queues, perm=perm, system=True)
        return topic

    def begin_delete(self, name: str) -> None:
        """Mark a topic as being deleted (saved before this returns): from here on it is gone
        for every reader, and a restart finishes the delete if this process does not."""
        topic = self._topics.pop(name)
        self._deleting[name] = topic
        try:
            self._save()
        except BaseException:
            self._topics[name] = self._deleting.pop(name)
            raise

    def cancel_delete(self, name: str) -> None:
        """The delete could not start after all (its tombstone was refused): the topic is back."""
        self._topics[name] = self._deleting.pop(name)
        self._save()

    def finish_delete(self, name: str) -> None:
        """The last step of a delete: the topic's entry leaves topics.json."""
        if self._deleting.pop(name, None) is not None:
            self._save()

    def pending_deletes(self) -> list[str]:
        """Topics whose delete began but has not finished (a crash, or a refused tombstone)."""
        return sorted(self._deleting)

    def _save(self) -> None:
        deleting = [
            _Entry(t.name, t.queues, t.perm, t.topic_type, t.system, deleting=True)
            for t in self._deleting.values()
        ]
        save_json(self._path, [*self.all(), *deleting])
