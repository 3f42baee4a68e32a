"""Rules for values the wire format can carry but the system cannot use, shared by both ends.

The SDK checks them before sending (a clear :class:`~pocketmq.errors.InvalidArgumentError`
instead of a raw ``ValueError`` or ``OverflowError``); the broker checks them again, since any
client may send anything (docs/protocol.md "Limits").
"""

from __future__ import annotations

import math
from typing import Final

from pocketmq.protocol import structs as w

__all__ = ["MAX_RETRIES", "MAX_RETRY_MULTIPLIER", "retry_policy_problem"]

MAX_RETRIES: Final = 10_000
MAX_RETRY_MULTIPLIER: Final = 100.0


def retry_policy_problem(spec: w.GroupSpec, max_delay: float = math.inf) -> str | None:
    """Why a group's retry policy cannot work, or None. ``max_delay`` (seconds) is the broker's
    bound on any delay (``[broker] max_delay``; a client does not know it)."""
    if not -1 <= spec.max_retries <= MAX_RETRIES:
        return f"max_retries must be between -1 (never give up) and {MAX_RETRIES}"
    bound_ms = max_delay * 1000
    for delay in spec.retry_delays_ms:
        if not 0 <= delay <= bound_ms:
            return f"retry delay {delay} ms outside 0..{bound_ms:.0f} ms (max_delay)"
    if not 0 <= spec.retry_initial_ms <= bound_ms:
        return f"retry initial delay {spec.retry_initial_ms} ms outside 0..{bound_ms:.0f} ms"
    if not 0 <= spec.retry_max_ms <= bound_ms:
        return f"retry maximum delay {spec.retry_max_ms} ms outside 0..{bound_ms:.0f} ms"
    multiplier = spec.retry_multiplier
    if not (math.isfinite(multiplier) and 1 <= multiplier <= MAX_RETRY_MULTIPLIER):
        return (
            f"retry multiplier {multiplier} must be a number between 1 and {MAX_RETRY_MULTIPLIER:g}"
        )
    return None
