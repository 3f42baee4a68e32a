"""Store configuration: one frozen dataclass, every default in one place.

Defaults follow RocketMQ where it has one (72 h retention, 4 MiB messages, async flush) and are
documented in docs/storage-format.md and docs/semantics.md. Every value is checked when the
object is built, so a typo in a config file stops the broker at start-up instead of quietly
meaning something else.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields

__all__ = ["FlushMode", "RecoveryMode", "StoreConfig"]

MiB = 1024 * 1024


class FlushMode(enum.Enum):
    """When a send is acknowledged: after the page cache has it (async, fast; a machine crash may
    lose the last fraction of a second) or after an fsync covers it (sync, group commit).
    docs/semantics.md, "Delivery guarantees"."""

    ASYNC = "async"
    SYNC = "sync"


class RecoveryMode(enum.Enum):
    """What recovery does with damage to records the store had confirmed durable
    (docs/storage-format.md §6)."""

    STRICT = "strict"
    """Refuse to open, naming the file and offset, so an operator decides."""
    QUARANTINE = "quarantine"
    """Set the damaged bytes aside (``store/quarantine/``), keep every intact record, open."""


_POSITIVE_SECONDS = ("flush_interval", "sync_flush_timeout", "checkpoint_interval", "busy_timeout")


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreConfig:
    """Every setting of the store, frozen so one store never sees two configurations; defaults and
    their sources are in docs/semantics.md, "Store"."""

    segment_size: int = 128 * MiB
    consume_queue_entries_per_file: int = 300_000
    index_max_entries: int = 400_000
    flush_mode: FlushMode = FlushMode.ASYNC
    flush_interval: float = 0.5
    flush_dirty_bytes: int = 4 * MiB
    sync_flush_timeout: float = 5.0
    checkpoint_interval: float = 1.0
    max_message_size: int = 4 * MiB
    max_properties_size: int = 32 * 1024
    retention_hours: float = 72.0
    max_store_bytes: int | None = None
    min_free_disk_bytes: int = 64 * MiB
    busy_timeout: float = 1.0
    recovery: RecoveryMode = RecoveryMode.STRICT
    max_open_queue_files: int = 0
    """Consume-queue files kept open at once (0: a quarter of the process's descriptor limit,
    at least 64); the least recently used are closed beyond it."""
    store_host: str = "127.0.0.1:10911"
    fault_file: str | None = None
    """Testing only: a JSON rules file that makes chosen file operations fail (faults.py)."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{item.name} must be a finite number, not {value}")
        if not isinstance(self.flush_mode, FlushMode):
            raise ValueError(f"flush_mode must be one of {[m.value for m in FlushMode]}")
        if not isinstance(self.recovery, RecoveryMode):
            raise ValueError(f"recovery must be one of {[m.value for m in RecoveryMode]}")
        if self.segment_size < 4096:
            raise ValueError("segment_size must be at least 4096 bytes")
        if self.consume_queue_entries_per_file < 1:
            raise ValueError("consume_queue_entries_per_file must be positive")
        if self.index_max_entries < 16:
            raise ValueError("index_max_entries must be at least 16")
        for name in _POSITIVE_SECONDS:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_message_size < 1:
            raise ValueError("max_message_size must be positive")
        if self.max_properties_size < 1 or self.flush_dirty_bytes < 1:
            raise ValueError("max_properties_size and flush_dirty_bytes must be positive")
        if self.retention_hours < 0:
            raise ValueError("retention_hours must not be negative")
        if self.max_store_bytes is not None and self.max_store_bytes < self.segment_size:
            raise ValueError("max_store_bytes must be at least one segment")
        if self.min_free_disk_bytes < 0 or self.max_open_queue_files < 0:
            raise ValueError("min_free_disk_bytes and max_open_queue_files must not be negative")
