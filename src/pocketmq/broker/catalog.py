"""The catalog: topics and groups, and what an operator asks about them.

Creating and deleting topics and groups, browsing any topic without consuming it, looking
messages up by id or key, the attempt history, per-queue offsets and the broker's status.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence

from pocketmq.broker.groups import GroupConfig
from pocketmq.broker.history import HISTORY_TOPIC, Attempt
from pocketmq.broker.model import Delivered
from pocketmq.broker.parts import BROWSABLE_INTERNAL, PUT_CODES, BrokerPart
from pocketmq.broker.replica_log import ReplicaLog
from pocketmq.broker.replication import Role
from pocketmq.errors import (
    InvalidArgumentError,
    error_from_code,
)

__all__ = ["Catalog"]

log = logging.getLogger("pocketmq.broker")


class Catalog(BrokerPart):
    """Topics, groups, queries and status."""

    def delete_topic(self, name: str) -> None:
        """Delete a user topic: a tombstone in the log first (so a restart does not bring its
        messages back), then its definition; a refused tombstone leaves the topic as it was."""
        topic = self.topics.require(name)
        if topic.system:
            raise InvalidArgumentError(f"{name!r} is a system topic")
        result = self.store.delete_topic(name)
        if not result.status.stored:
            raise error_from_code(
                PUT_CODES[result.status],
                f"topic {name!r} was not deleted: {result.reason or result.status.value}",
            )
        self.topics.delete(name)
        self.offsets.forget_topic(name)
        for key in [k for k in self._shared.resets if k[1] == name]:
            del self._shared.resets[key]
        self.offsets.persist(force=True)  # a re-created topic must not inherit old offsets
        self.pop_state.forget(topic=name)

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
                "damaged_records_read": stats.damaged_records_read,
                "quarantined_ranges": stats.quarantined_ranges,
                "recovered_truncated_bytes": stats.recovered_truncated_bytes,
                "open_queue_files": stats.open_queue_files,
            },
            "replication": self._replication_status(),
        }
