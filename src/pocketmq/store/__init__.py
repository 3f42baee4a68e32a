"""The durable message store: commit log, consume queues, index, checkpoint, recovery, retention.

No networking here (a layering test enforces it): the broker drives the store, and the store only
knows files. See docs/storage-format.md for the on-disk contract.
"""

from pocketmq.store import faults
from pocketmq.store.config import FlushMode, RecoveryMode, StoreConfig
from pocketmq.store.message import GetResult, PutResult, QueueEntry, StoredMessage, StoreMessage
from pocketmq.store.record import (
    compute_tag_code,
    pack_host,
    unpack_host,
)
from pocketmq.store.status import GetStatus, PutStatus
from pocketmq.store.store import MessageStore, RetentionReport, StoreStatistics

__all__ = [
    "FlushMode",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "QueueEntry",
    "RecoveryMode",
    "RetentionReport",
    "StoreConfig",
    "StoreMessage",
    "StoreStatistics",
    "StoredMessage",
    "compute_tag_code",
    "faults",
    "pack_host",
    "unpack_host",
]
