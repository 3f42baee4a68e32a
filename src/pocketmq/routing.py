"""Message group → queue, by jump consistent hashing.

When a topic grows from n to n+1 queues only about 1/(n+1) of the groups move (plain modulo moves
almost all of them), so FIFO groups keep their queue across a scale-out. The key is a stable
64-bit digest of the group, never Python's per-process ``hash``.
"""

from __future__ import annotations

import hashlib

__all__ = ["jump_hash", "queue_for_group"]

_MASK = (1 << 64) - 1


def jump_hash(key: int, buckets: int) -> int:
    """Lamping & Veach's jump consistent hash of a 64-bit ``key`` into ``buckets``."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * 2862933555777941757 + 1) & _MASK
        candidate = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return bucket


def queue_for_group(group: str, queues: int) -> int:
    """The queue that every message of ``group`` goes to, the same in every process and every client
    (gRPC and native), so one message group is read in order from one queue."""
    digest = hashlib.blake2b(group.encode(), digest_size=8).digest()
    return jump_hash(int.from_bytes(digest, "little"), queues)
