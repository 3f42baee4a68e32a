"""How long the broker took to answer each kind of request, for ``rocketmq_rpc_latency``.

Counted per (protocol, request, response code) into RocketMQ 5's buckets (milliseconds: 1, 3,
5, 10, 100, 1000, 3000); a long poll counts the time it waited. One ``perf_counter`` pair and a
few list increments per request: read only when Prometheus scrapes (docs/operations.md).
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["LATENCY_BUCKETS_MS", "RpcLatency"]

LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 10.0, 100.0, 1000.0, 3000.0)
_FIRST = LATENCY_BUCKETS_MS[0]


class RpcLatency:
    """Bucket counts and sums of request latencies (module doc)."""

    def __init__(self) -> None:
        # (protocol, request, response) -> counts per bucket (the last: over the largest bound)
        self.counts: dict[tuple[str, str, str], list[int]] = {}
        self.sums_ms: dict[tuple[str, str, str], float] = {}

    def observe(self, protocol: str, request: str, response: str, seconds: float) -> None:
        """One request of kind ``request`` answered with ``response`` after ``seconds``."""
        self.observe_key((protocol, request, response), seconds)

    def observe_key(self, key: tuple[str, str, str], seconds: float) -> None:
        """:meth:`observe` with the labels already in a tuple (the native port keeps one per
        request and response code, so the hot path builds none)."""
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = [0] * (len(LATENCY_BUCKETS_MS) + 1)
            self.sums_ms[key] = 0.0
        millis = seconds * 1000
        counts[0 if millis <= _FIRST else bisect_left(LATENCY_BUCKETS_MS, millis)] += 1
        self.sums_ms[key] += millis
