"""A consumer group's definition and its retry policy: values the broker keeps, the protocols
carry and the gRPC settings describe.

A group's policy decides how often a failing message is retried and how long to wait in between
(16 retries on the delay levels from level 3; FIFO groups retry 17 times with 1s 5s 10s 30s 1m
... 2h: docs/semantics.md, "Consumer retry, delays and dead letters" and "Ordered messages"),
and whether it consumes in order. The broker persists them (broker/groups.py).
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ["ConsumeFrom", "GroupConfig", "RetryPolicy"]


class ConsumeFrom(enum.Enum):
    """Where a new group (no committed offset) starts: the oldest retained message (default: never
    miss anything sent before the group existed) or the newest."""

    FIRST = "first"
    LAST = "last"


class RetryPolicy(msgspec.Struct, frozen=True):
    """Customized (a list of delays) or exponential (initial × multiplier^n, capped).

    An empty ``delays`` with ``initial`` 0 means the broker's delay levels from level 3 on
    (10s, 30s, 1m, ...), RocketMQ's default for concurrent consumers.
    """

    max_retries: int = 16
    delays: tuple[float, ...] = ()
    initial: float = 0.0
    multiplier: float = 2.0
    maximum: float = 7200.0

    @property
    def max_attempts(self) -> int:
        """Deliveries before the dead-letter queue: the first one plus ``max_retries``."""
        return self.max_retries + 1

    def delay(self, retry: int, levels: tuple[float, ...]) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        retry = max(1, retry)
        if self.initial > 0:
            try:
                grown = self.initial * self.multiplier ** (retry - 1)
            except OverflowError:  # a group that never gives up (-1) retries past 2 ** 1024
                grown = self.maximum
            return float(min(self.maximum, grown))
        table = self.delays or levels[2:]
        return float(table[min(retry, len(table)) - 1])


class GroupConfig(msgspec.Struct, frozen=True):
    """A consumer group's definition: consumption mode, retry policy and start position; persisted
    in ``groups.json`` and sent to the gRPC clients in their settings."""

    name: str
    fifo: bool = False
    broadcast: bool = False
    consume_from: ConsumeFrom = ConsumeFrom.FIRST
    retry: RetryPolicy = RetryPolicy()
    retry_queues: int = 1
