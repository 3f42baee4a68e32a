"""Verify a whole store directory offline: every record of every segment, not only the part
recovery looks at (docs/storage-format.md §7, ``pocketmq store check``).

It takes no lock and writes nothing, so it can run beside a live broker (records being appended
at that moment may show up as a torn tail).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pocketmq.store.checkpoint import read_checkpoint, read_flush_marker
from pocketmq.store.commitlog import CommitLog, Damage
from pocketmq.store.config import StoreConfig
from pocketmq.store.consumequeue import ConsumeQueue
from pocketmq.store.openfiles import OpenFiles
from pocketmq.store.quarantine import LostEntry, Quarantine, QuarantinedRange

__all__ = ["CheckReport", "check_store"]


@dataclass(kw_only=True)
class CheckReport:
    """What a full verification found."""

    records: int = 0
    log_start: int = 0
    log_end: int = 0
    damage: list[tuple[Damage, list[LostEntry]]] = field(default_factory=list)
    """Damage not set aside yet, with the queue positions whose records lie in it."""
    quarantined: list[QuarantinedRange] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """Whether nothing is left to set aside: what ``pocketmq store check`` turns into its exit
        status."""
        return not self.damage


def check_store(directory: str, config: StoreConfig | None = None) -> CheckReport:
    """Verify every record of the store in ``directory`` (the ``store`` folder of a broker's
    data directory)."""
    config = config or StoreConfig()
    commitlog_dir = os.path.join(directory, "commitlog")
    if not os.path.isdir(commitlog_dir):
        raise FileNotFoundError(f"{directory} holds no commit log")
    quarantine = Quarantine(os.path.join(directory, "quarantine"))
    commitlog = CommitLog(commitlog_dir, config.segment_size)
    files = OpenFiles(64)
    try:
        report = CheckReport(log_start=commitlog.min_offset, quarantined=list(quarantine.ranges))
        for _ in commitlog.scan(commitlog.min_offset, skip=quarantine):
            report.records += 1
        report.log_end = commitlog.scan_end
        found = list(commitlog.scan_damage)
        floor = _confirmed_end(directory)
        if report.log_end < floor and not any(d.tail for d in found):
            found.append(
                Damage(report.log_end, floor, "the log ends before data it confirmed durable", True)
            )
        queues = _queues(os.path.join(directory, "consumequeue"), config, files)
        for damage in found:
            lost = [
                LostEntry(queue.topic, queue.queue_id, offset)
                for queue in queues
                for offset in queue.offsets_between(damage.start, damage.end)
            ]
            report.damage.append((damage, lost))
        for queue in queues:
            queue.close()
        return report
    finally:
        files.close_all()
        commitlog.close()


def _confirmed_end(directory: str) -> int:
    """The end of what the store confirmed durable (checkpoint and flush marker)."""
    checkpoint = read_checkpoint(os.path.join(directory, "checkpoint"))
    marker = read_flush_marker(os.path.join(directory, "flushed"))
    return max(checkpoint.commitlog_flushed if checkpoint else 0, marker or 0)


def _queues(root: str, config: StoreConfig, files: OpenFiles) -> list[ConsumeQueue]:
    queues: list[ConsumeQueue] = []
    if not os.path.isdir(root):
        return queues
    for topic in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, topic))):
            if name.isdigit():
                queue = ConsumeQueue(
                    os.path.join(root, topic, name),
                    topic,
                    int(name),
                    config.consume_queue_entries_per_file,
                    files,
                )
                queue.load()
                queues.append(queue)
    return queues
