"""Store configuration: one frozen dataclass, every default in one place.

Defaults follow RocketMQ where it has one (72 h retention, 4 MiB messages, async flush) and are
documented in docs/storage-format.md and docs/semantics.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FlushMode", "RecoveryMode", "StoreConfig"]

MiB = 1024 * 1024


class FlushMode(enum.Enum):
    ASYNC = "async"
    SYNC = "sync"


class RecoveryMode(enum.Enum):
    STRICT = "strict"
    """Refuse to open when data already confirmed durable fails verification."""
    TRUNCATE = "truncate"
    """Truncate at the first invalid record wherever it is (operator's choice after a disaster)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreConfig:
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
    store_host: str = "127.0.0.1:10911"

    def __post_init__(self) -> None:
        if self.segment_size < 4096:
            raise ValueError("segment_size must be at least 4096 bytes")
        if self.consume_queue_entries_per_file < 1:
            raise ValueError("consume_queue_entries_per_file must be positive")
        if self.index_max_entries < 16:
            raise ValueError("index_max_entries must be at least 16")
        if self.flush_interval <= 0 or self.checkpoint_interval <= 0:
            raise ValueError("flush_interval and checkpoint_interval must be positive")
        if self.max_message_size < 1:
            raise ValueError("max_message_size must be positive")
