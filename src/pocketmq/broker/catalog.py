"""The catalog: topics and groups, and what an operator asks about them.

Creating and deleting topics and groups, browsing any topic without consuming it, looking
messages up by id or key, the attempt history, per-queue offsets and the broker's status.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pocketmq.broker.history import HISTORY_TOPIC
from pocketmq.broker.parts import BROWSABLE_INTERNAL, PUT_CODES, BrokerPart
from pocketmq.broker.replica_log import ReplicaLog
from pocketmq.broker.replication import Role
from pocketmq.broker.topics import TopicConfig, TopicType, describe, differences
from pocketmq.errors import (
    InvalidArgumentError,
    PreconditionFailedError,
    error_from_code,
)
from pocketmq.model.attempts import Attempt
from pocketmq.model.groups import GroupConfig
from pocketmq.model.messages import Delivered
from pocketmq.store import PutResult

__all__ = ["Catalog", "TopicChange"]


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What a topic update does (or would do): ``dropped`` queues are hidden, not emptied — their
    messages stay in the store and come back if the topic grows again; ``stored`` messages are in
    them, of which each group with progress on the topic has not consumed ``unconsumed[group]``
    (no group with progress: ``unconsumed`` is ``{}`` and all ``stored`` count as unconsumed)."""

    before: TopicConfig
    after: TopicConfig
    dropped: tuple[int, ...] = ()
    stored: int = 0
    unconsumed: dict[str, int] = field(default_factory=dict)
    refusal: str = ""
    applied: bool = False

    @property
    def at_stake(self) -> int:
        """The messages the change would hide from someone: the largest group's count, or every
        stored one when no group has consumed the topic."""
        return max(self.unconsumed.values(), default=self.stored)


log = logging.getLogger("pocketmq.broker")


class Catalog(BrokerPart):
    """Topics, groups, queries and status."""

    def delete_topic(self, name: str) -> None:
        """Delete a user topic, all or nothing (docs/storage-format.md §1, "Tombstones"):
        topics.json marks it as being deleted, then a tombstone goes in the log (so a rebuild
        does not bring its messages back), its queues, offsets and pop state go, and its entry
        leaves topics.json. A crash in between is finished by the next start
        (:meth:`finish_deletes`); a refused tombstone leaves the topic as it was."""
        if name not in self.topics.pending_deletes():  # else: finish a delete begun before
            topic = self.topics.require(name)
            if topic.system:
                raise InvalidArgumentError(f"{name!r} is a system topic")
            self.topics.begin_delete(name)
        result = self._purge(name)
        if not result.status.stored:
            self.topics.cancel_delete(name)
            raise error_from_code(
                PUT_CODES[result.status],
                f"topic {name!r} was not deleted: {result.reason or result.status.value}",
            )

    def finish_deletes(self) -> None:
        """Finish the topic deletes a crash interrupted (a master, at start and on promotion):
        every step of :meth:`delete_topic` is safe to do twice."""
        for name in self.topics.pending_deletes():
            result = self._purge(name)
            if result.status.stored:
                log.warning("topic %r: finished deleting it (a restart came in the middle)", name)
            else:
                log.error(
                    "topic %r: its delete could not be finished (%s); it stays deleted for "
                    "clients, and the delete is tried again at the next start or by `pocketmq "
                    "topic delete %s`",
                    name,
                    result.reason or result.status.value,
                    name,
                )

    def _purge(self, name: str) -> PutResult:
        """The steps of a delete after the mark: each one safe to repeat after a crash."""
        result = self.store.delete_topic(name)  # the tombstone, then the queues
        if not result.status.stored:
            return result
        self.offsets.forget_topic(name)
        for key in [k for k in self._shared.resets if k[1] == name]:
            del self._shared.resets[key]
        self.offsets.persist(force=True)  # a re-created topic must not inherit old offsets
        self.pop_state.forget(topic=name)
        self.pop_state.persist(force=True)  # nor in-flight pops of the old one
        self.topics.finish_delete(name)
        return result

    def update_topic(
        self,
        name: str,
        *,
        queues: int = 0,
        topic_type: str = "",
        perm: int = -1,
        force: bool = False,
        dry_run: bool = False,
    ) -> TopicChange:
        """Change a user topic's queue count, type or permission (0, "" and -1: unchanged).
        Dropping queues that hold messages not consumed yet is refused unless ``force``, with
        their count per group (docs/cli.md, "topic update"); ``dry_run`` only reports."""
        before = self.topics.require(name)
        if before.system:
            raise InvalidArgumentError(f"{name!r} is a system topic: the broker manages it")
        try:
            kind = TopicType(topic_type) if topic_type else before.topic_type
        except ValueError:
            raise InvalidArgumentError(
                f"topic type {topic_type!r} is not one of normal, fifo, delay, transaction"
            ) from None
        after = TopicConfig(
            name=name,
            queues=queues or before.queues,
            perm=before.perm if perm < 0 else perm,
            topic_type=kind,
        )
        self.topics.check(after)
        change = self._measure(before, after)
        if change.at_stake and not force:
            change = replace(change, refusal=_refusal(change))
        if dry_run:
            return change
        if change.refusal:
            raise PreconditionFailedError(change.refusal)
        self.topics.update(after)
        if change.dropped:
            log.warning(
                "topic %s updated (%s): queues %s hidden with %d stored message(s)%s",
                name,
                ", ".join(differences(before, after)),
                _span(change.dropped),
                change.stored,
                " (forced)" if change.at_stake else "",
            )
        return replace(change, applied=True)

    def _measure(self, before: TopicConfig, after: TopicConfig) -> TopicChange:
        """The messages in the queues ``after`` drops, and each group's unconsumed share (its
        committed offset or pop progress, whichever is further, as `group status` counts)."""
        dropped = tuple(range(after.queues, before.queues))
        positions: dict[tuple[str, int], int] = {}
        for (group, topic, queue_id), offset in self.offsets.snapshot().items():
            if topic == before.name:
                positions[(group, queue_id)] = offset
        for (group, topic, queue_id), state in self.pop_state.items():
            if topic == before.name:
                key = (group, queue_id)
                positions[key] = max(positions.get(key, 0), state.committed)
        groups = sorted({group for group, _ in positions})
        stored = 0
        unconsumed = dict.fromkeys(groups, 0)
        for queue_id in dropped:
            low = self.store.min_offset(before.name, queue_id)
            high = self.store.max_offset(before.name, queue_id)
            stored += high - low
            for group in groups:
                consumed = max(low, positions.get((group, queue_id), low))
                unconsumed[group] += max(0, high - consumed)
        return TopicChange(before, after, dropped, stored, unconsumed)

    def delete_group(self, name: str) -> None:
        """Delete a group with its committed offsets and pop state, so a group created later under
        the same name starts clean."""
        self.groups.require(name)
        self.groups.delete(name)
        self.offsets.forget_group(name)
        for key in [k for k in self._shared.resets if k[0] == name]:
            del self._shared.resets[key]
        self.pop_state.forget(group=name)

    def require_group(self, name: str) -> GroupConfig:
        """A consumer group's configuration (created on first use when auto-create is on)."""
        return self._group(name)

    def report_outcomes(self, group: str, consumer: str, attempts: Sequence[Attempt]) -> None:
        """Push consumers report their successful attempts (failures come with send-back); they
        are recorded in the background, a slice at a time (:mod:`pocketmq.broker.history`)."""
        self.history.report(group, consumer, attempts)

    def message_history(self, message_id: str) -> list[Attempt]:
        """Every recorded delivery attempt of a message, oldest first (``pocketmq message
        history``)."""
        return self.history.query(message_id)

    def browse(
        self, topic: str, queue_id: int, offset: int, max_count: int = 32
    ) -> list[Delivered]:
        """Read any topic (dead-letter topics and the internal ledgers included) without
        consuming: operator tools and exports."""
        if topic == HISTORY_TOPIC:
            self.history.flush()
        elif topic not in BROWSABLE_INTERNAL:
            self.topics.require(topic)
        got = self.store.get_messages(
            topic,
            queue_id,
            max(offset, self.store.min_offset(topic, queue_id)),
            max_count=max(1, min(max_count, 1024)),
        )
        return [self._deliver(m) for m in got.messages]

    def query_messages(
        self, *, message_id: str = "", topic: str = "", key: str = "", max_count: int = 32
    ) -> list[Delivered]:
        """Messages by id, or by topic and business key, through the store's index: every stored
        copy, retries and dead letters included."""
        if message_id:
            found = self.store.query_by_id(message_id, max_count)
        elif topic and key:
            found = self.store.query_by_key(topic, key, max_count)
        else:
            raise InvalidArgumentError("query by message id, or by topic and key")
        return [self._deliver(m) for m in found]

    def queue_status(self, topic: str, group: str = "") -> list[tuple[int, int, int, int]]:
        """``(queue id, min offset, max offset, committed or -1)`` for each queue."""
        queues = BROWSABLE_INTERNAL.get(topic) or self.topics.require(topic).queues
        if topic == HISTORY_TOPIC:
            self.history.flush()
        rows = []
        for queue_id in range(queues):
            committed = self.offsets.query(group, topic, queue_id) if group else -1
            rows.append(
                (
                    queue_id,
                    self.store.min_offset(topic, queue_id),
                    self.store.max_offset(topic, queue_id),
                    committed,
                )
            )
        return rows

    def _replication_status(self) -> dict[str, object]:
        replication = self.replication
        epoch = self.store.epochs.current
        return {
            "broker_id": self.config.broker_id,
            "role": replication.acting_role(),  # "fenced": a master that may not write now
            "fence": replication.write_refusal() if replication.role.value == "master" else "",
            "mode": replication.mode.value,
            "epoch": epoch.number if epoch is not None else 0,
            "log_end": self.store.write_position,
            "confirmed": replication.confirmed,
            "lag_bytes": replication.lag_bytes(),
            "latency_ms": replication.latency_ms(),
            "chunks_sent": replication.chunks_sent,
            "bytes_sent": replication.bytes_sent,
            "slaves": [
                {"broker_id": s.broker_id, "address": s.address, "acked": s.acked}
                for s in replication.slaves.values()
            ],
            "in_sync": len(replication.in_sync()),
            "links_refused": replication.links_refused,
            "members": None if replication.members is None else sorted(replication.members),
            "master": replication.master_address,
            "gap_bytes": replication.gap(),
            "last_contact": replication.contact_at,
            "link_error": replication.link_error,
            # a slave lacking records it once held (a repair set them aside): not electable
            "missing": self._missing(),
            "controller": replication.controller(),
        }

    def _missing(self) -> str:
        if self.replication.role is not Role.SLAVE:
            return ""  # a master's damaged ranges are lost, not waiting to be copied again
        missing = ReplicaLog(self.store, self.config.broker_name).missing()
        return missing.describe() if missing is not None else ""

    def status(self) -> dict[str, object]:
        """The broker's counters and store figures as plain values, for ``pocketmq broker status``
        and the benchmarks."""
        stats = self.store.statistics()
        try:
            disk = shutil.disk_usage(self.config.data_dir)
            free, total = disk.free, disk.total
        except OSError:  # the directory is gone or unreadable: say so rather than fail
            free = total = -1
        return {
            "counters": {**self.counters, "transactions_pending": self.transactions.pending_count},
            "uptime_seconds": round(self._clock() - self._shared.started_at, 1),
            "store": {
                "disk_free_bytes": free,
                "disk_total_bytes": total,
                "messages_put": stats.messages_put,
                "bytes_put": stats.bytes_put,
                "write_position": stats.write_position,
                "flushed_position": stats.flushed_position,
                "segments": stats.segments,
                "queues": stats.queues,
                "fsyncs": stats.fsyncs,
                "flush_mode": stats.flush_mode,
                "failure": stats.failure,
                "refusing_writes": stats.refusing_writes,
                "damaged_records_read": stats.damaged_records_read,
                "quarantined_ranges": stats.quarantined_ranges,
                "recovered_truncated_bytes": stats.recovered_truncated_bytes,
                "open_queue_files": stats.open_queue_files,
            },
            "replication": self._replication_status(),
        }


def _span(queues: tuple[int, ...]) -> str:
    return f"{queues[0]}" if len(queues) == 1 else f"{queues[0]}-{queues[-1]}"


def _refusal(change: TopicChange) -> str:
    """Why dropping ``change.dropped`` is refused without --force, with the counts."""
    name = change.before.name
    if change.unconsumed:
        behind = ", ".join(f"group {g}: {n}" for g, n in change.unconsumed.items() if n)
        what = f"{change.at_stake} unconsumed message(s) ({behind})"
    else:
        what = f"{change.stored} stored message(s), which no group has consumed"
    return (
        f"topic {name!r} ({describe(change.before)}): going to {change.after.queues} queues "
        f"would hide queues {_span(change.dropped)} and {what}; consume them first, or repeat "
        "with --force (the messages stay in the store and come back if the topic grows again)"
    )
