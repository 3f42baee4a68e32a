"""Outcomes of store operations as enums, not exceptions, and the store's reports of itself.

A full disk or an oversize message is an expected answer the broker passes on to a client; only
corruption and bugs raise. :class:`StoreStatistics` and :class:`RetentionReport` are what the store
says of its state (``pocketmq broker status``, metrics) and of a retention pass.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["GetStatus", "PutStatus", "RetentionReport", "StoreStatistics"]


class PutStatus(enum.Enum):
    """The outcome of an append, one per message: the broker maps each to a response code, so a full
    disk or an oversize message is an answer, not an exception."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    PROPERTIES_TOO_LARGE = "PROPERTIES_TOO_LARGE"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    DISK_FULL = "DISK_FULL"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    OUT_OF_RESOURCES = "OUT_OF_RESOURCES"
    """The process ran out of file descriptors; nothing was stored, retry later."""
    STORE_FAILED = "STORE_FAILED"
    """An fsync or write failed: this batch may or may not be durable, and the store accepts no
    more writes until it is restarted and recovers from the log (docs/storage-format.md §5)."""
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """Whether the message is in the log (a flush timeout still stored it)."""
        return self in _STORED


_STORED: frozenset[PutStatus] = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT})


class GetStatus(enum.Enum):
    """The outcome of a queue read, RocketMQ's names: tells a consumer whether to wait, move its
    offset, or skip."""

    FOUND = "FOUND"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreStatistics:
    """A snapshot of the store's counters."""

    messages_put: int
    bytes_put: int
    put_failures: int
    write_position: int
    flushed_position: int
    min_physical_offset: int
    segments: int
    queues: int
    fsyncs: int
    fsync_seconds: float
    recovered_truncated_bytes: int
    flush_mode: str
    quarantined_ranges: int
    damaged_records_read: int
    open_queue_files: int
    failure: str
    """Why the store stopped accepting writes ("" while it accepts them)."""
    refusing_writes: str = ""
    """Why the free-space guard refuses writes for now ("disk: ..."; "" while it does not)."""
    disk_free_bytes: int = -1
    """Free bytes on the store's file system at the guard's last look (-1: not known)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetentionReport:
    """What one retention pass removed, for the log line and the tests."""

    segments_deleted: int
    min_physical_offset: int
