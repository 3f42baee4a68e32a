"""Recovery: bring a store directory back to a consistent state before any write is accepted.

The rules (docs/storage-format.md §6) in one sentence: the log is cut only behind its last valid
record, and only where nothing there was confirmed durable; any other damage is set aside in the
quarantine with every intact record around it kept, or, for damage to records confirmed durable
under ``recovery = "strict"``, the store refuses to open and names the file and offset.

*Confirmed durable* is everything below the larger of the checkpoint's flushed position and the
flush marker (which is rewritten after every fsync, so after a process crash it is exact).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.errors import StoreCorruptedError
from pocketmq.names import TOMBSTONE_TOPIC
from pocketmq.properties import KEYS, MESSAGE_ID
from pocketmq.store.checkpoint import Checkpoint
from pocketmq.store.commitlog import CommitLog, Damage
from pocketmq.store.config import RecoveryMode
from pocketmq.store.consumequeue import ConsumeQueue
from pocketmq.store.index import IndexService, id_key, topic_key
from pocketmq.store.quarantine import LostEntry, Quarantine, QuarantinedRange

__all__ = ["Recovery", "RecoveryReport", "set_aside"]

log = logging.getLogger("pocketmq.store")

QueueMap = dict[tuple[str, int], ConsumeQueue]


@dataclass(kw_only=True)
class RecoveryReport:
    """What one recovery did (kept in the store's statistics and logged)."""

    log_end: int = 0
    truncated_bytes: int = 0
    set_aside: list[QuarantinedRange] = field(default_factory=list)
    replayed: int = 0
    rebuilt_queues: bool = False


@dataclass(frozen=True)
class _Decision:
    damage: Damage
    kind: str  # "torn", "damaged" or "missing"


class Recovery:
    """One recovery pass over a store's parts (the store owns them; this only drives them)."""

    def __init__(
        self,
        *,
        commitlog: CommitLog,
        queues: QueueMap,
        make_queue: Callable[[str, int], ConsumeQueue],
        index: IndexService,
        quarantine: Quarantine,
        mode: RecoveryMode,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = commitlog
        self._queues = queues
        self._make_queue = make_queue
        self._index = index
        self._quarantine = quarantine
        self._mode = mode
        self._clock = clock

    def run(
        self, checkpoint: Checkpoint | None, marker: int | None, *, unclean: bool
    ) -> RecoveryReport:
        """Verify the log from where the checkpoint (or the flush marker) says it was trusted, cut a
        torn tail, handle damage per the recovery mode, and replay what the consume queues and the
        index missed (docs/storage-format.md §6)."""
        commitlog = self._log
        first = commitlog.min_offset
        if checkpoint is None:
            start, trusted, floor = first, {}, first
        else:
            start = max(min(checkpoint.dispatched, checkpoint.commitlog_flushed), first)
            trusted = dict(checkpoint.queues)
            floor = max(checkpoint.commitlog_flushed, first)
        floor = max(floor, marker or 0)
        report = RecoveryReport()

        # 1. verify from the checkpoint's segment on, stepping over damage
        end = self._verify(start, first)
        decisions = self._decide(commitlog.scan_damage, end, floor)

        # 2. set damage aside (saved and listed before anything is cut), then cut the tail
        for queue in self._queues.values():
            queue.load()
        for decision in decisions:
            report.set_aside.append(self._set_aside(decision))
        if unclean or decisions:
            extent = commitlog.written_extent()
            if extent > end:
                report.truncated_bytes = extent - end
        commitlog.truncate(end)
        commitlog.flushed_position = min(floor, end)
        report.log_end = end

        # 3. consume queues: positions whose records are gone become holes; damaged queue files
        #    (fewer entries than the checkpoint counted) and missing ones mean a rebuild
        rebuild = self._check_queues(end, trusted, report.set_aside)
        rebuild = rebuild or (checkpoint is None and end > first)
        if rebuild:
            for queue in self._queues.values():
                queue.reset()
        report.rebuilt_queues = rebuild

        # 4. index: damaged files were dropped on load; after a crash the newest is not trusted
        index_from = self._index_from(first, unclean)

        # 5. replay what the queues and the index are missing (idempotent)
        queue_from = first if rebuild else start
        report.replayed = self._replay(queue_from, index_from, trusted)

        # 6. a queue never hands out an offset twice: keep the checkpoint's counts as a floor
        for key, count in trusted.items():
            topic, _, queue_text = key.rpartition("/")
            self._make_queue(topic, int(queue_text)).reserve(count, end)
        for queue in self._queues.values():
            queue.set_min_physical(first)
        commitlog.write_position = end
        return report

    def _verify(self, start: int, first: int) -> int:
        """Scan the log from ``start``'s segment on, not before its ``first`` offset (the commit
        log notes the damage it steps over); returns the end of the last valid record."""
        commitlog = self._log
        segment_size = commitlog.segment_size
        verify_from = max(first, start - start % segment_size)
        segments = commitlog.segments
        if segments and verify_from >= segments[-1].base + segment_size:
            verify_from = segments[-1].base  # segments were lost: the floor check catches it
        for _ in commitlog.scan(verify_from, skip=self._quarantine):
            pass
        return commitlog.scan_end

    def _check_queues(
        self, end: int, trusted: dict[str, int], set_aside: list[QuarantinedRange]
    ) -> bool:
        """Cut the consume queues at the log's ``end`` and punch holes where records were set
        aside; True when one must be rebuilt: fewer entries than the checkpoint counted (a
        damaged file), or missing."""
        rebuild = False
        for (topic, queue_id), queue in self._queues.items():
            queue.trim(end)
            if queue.max_offset < trusted.get(f"{topic}/{queue_id}", 0):
                log.warning("consume queue %s/%d is behind its checkpoint", topic, queue_id)
                rebuild = True
        for item in set_aside:
            self._punch_holes(item, end)
        for key, count in trusted.items():
            topic, _, queue_text = key.rpartition("/")
            if count and (topic, int(queue_text)) not in self._queues:
                log.warning("consume queue %s is missing", key)
                rebuild = True
        return rebuild

    def _index_from(self, first: int, unclean: bool) -> int | None:
        """Where the index is replayed from (None: it is complete): damaged files were dropped
        on load, a missing index is rebuilt from the log's start, and after a crash the newest
        file is not trusted."""
        index_from = self._index.rebuild_from
        if not self._index.files:
            return first
        if unclean:
            dropped = self._index.drop_last_for_rebuild()
            if dropped is not None:
                index_from = dropped if index_from is None else min(index_from, dropped)
        return index_from

    # -- classification -------------------------------------------------------------------

    def _decide(self, damage: list[Damage], end: int, floor: int) -> list[_Decision]:
        """Classify every stretch of damage; refuse (strict mode) before changing anything."""
        decisions: list[_Decision] = []
        for item in damage:
            confirmed = item.start < floor
            if item.tail and not confirmed:
                decisions.append(_Decision(item, "torn"))
                continue
            if confirmed and self._mode is RecoveryMode.STRICT:
                self._refuse(
                    item.start, f"a record confirmed durable fails verification ({item.reason})"
                )
            decisions.append(_Decision(item, "damaged"))
        if end < floor and not any(d.damage.tail for d in decisions):
            if self._mode is RecoveryMode.STRICT:
                self._refuse(
                    end,
                    "the log ends before data it confirmed durable (a file was truncated or lost)",
                )
            decisions.append(
                _Decision(
                    Damage(end, floor, "log shorter than its confirmed data", True), "missing"
                )
            )
        return decisions

    def _refuse(self, offset: int, reason: str) -> None:
        segment = self._log.segment_for(offset)
        raise StoreCorruptedError(
            f"{reason}; nothing was changed. `pocketmq store check` lists the damage; "
            '`pocketmq store repair` (or recovery = "quarantine") sets the damaged bytes aside '
            "in store/quarantine/ and keeps every intact record",
            path=segment.path if segment else self._log.directory,
            offset=offset,
        )

    # -- setting damage aside -------------------------------------------------------------

    def _set_aside(self, decision: _Decision) -> QuarantinedRange:
        damage = decision.damage
        return set_aside(
            self._log,
            self._queues,
            self._quarantine,
            damage.start,
            damage.end,
            decision.kind,
            damage.reason,
            int(self._clock() * 1000),
        )

    def _punch_holes(self, item: QuarantinedRange, log_end: int) -> None:
        """Entries pointing into a damaged range inside the log become holes."""
        if item.start >= log_end:
            return  # a tail: queue recovery made those entries holes already
        by_queue: dict[tuple[str, int], list[int]] = {}
        for lost in item.lost:
            by_queue.setdefault((lost.topic, lost.queue_id), []).append(lost.queue_offset)
        for key, offsets in by_queue.items():
            queue = self._queues.get(key)
            if queue is not None:
                queue.put_holes(offsets, item.start)

    # -- replay ---------------------------------------------------------------------------

    def _replay(self, queue_from: int, index_from: int | None, trusted: dict[str, int]) -> int:
        replay_from = queue_from if index_from is None else min(queue_from, index_from)
        replayed = 0
        index = self._index
        for record in self._log.scan(replay_from, skip=self._quarantine):
            physical = record.physical_offset
            if physical >= queue_from:
                if record.topic == TOMBSTONE_TOPIC:
                    self._forget_topic(record.body.decode("utf-8", "replace"), trusted)
                self._make_queue(record.topic, record.queue_id).put_one(
                    record.queue_offset, physical, record.size, record.tag_code
                )
            if index_from is not None and physical >= index_from:
                props = record.properties
                message_id = props.get(MESSAGE_ID, "")
                if message_id:
                    index.put(id_key(message_id), physical)
                keys = props.get(KEYS, "")
                if keys:
                    for key in keys.split():
                        index.put(topic_key(record.topic, key), physical)
            replayed += 1
        if replayed:
            log.info("recovery replayed %d records from offset %d", replayed, replay_from)
        return replayed

    def _forget_topic(self, topic: str, trusted: dict[str, int]) -> None:
        """A deleted topic's queues end here: what came before is not the re-created topic's."""
        for queue_key in [k for k in self._queues if k[0] == topic]:
            self._queues.pop(queue_key).destroy()
        for count_key in [k for k in trusted if k.rpartition("/")[0] == topic]:
            del trusted[count_key]


def set_aside(
    commitlog: CommitLog,
    queues: QueueMap,
    quarantine: Quarantine,
    start: int,
    end: int,
    kind: str,
    reason: str,
    now_ms: int,
) -> QuarantinedRange:
    """Copy log bytes ``[start, end)`` to the quarantine with the queue positions whose records
    lie there (what the range costs), and say so in the log (docs/storage-format.md §7)."""
    lost = [
        LostEntry(topic, queue_id, offset)
        for (topic, queue_id), queue in sorted(queues.items())
        for offset in queue.offsets_between(start, end)
    ]
    data = b"" if kind == "missing" else commitlog.read_span(start, end)
    item = quarantine.add(
        QuarantinedRange(
            start=start, end=end, kind=kind, reason=reason, detected_at_ms=now_ms, lost=lost
        ),
        data,
    )
    level = logging.WARNING if kind in ("torn", "divergent") else logging.ERROR
    log.log(
        level,
        "commit log bytes %d-%d set aside (%s: %s), saved as %s; %d queued message(s) lost%s",
        start,
        end,
        kind,
        reason,
        os.path.join(quarantine.directory, item.saved) if item.saved else "nothing",
        len(lost),
        "".join(f"\n  lost {e.topic}/{e.queue_id} offset {e.queue_offset}" for e in lost[:20]),
    )
    return item
