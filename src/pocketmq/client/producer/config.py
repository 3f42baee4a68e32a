"""What a producer is configured with, and what it counts.

Kept apart from the producer itself so that the sender, the accumulator and the transaction
producer can share one definition without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.client.backoff import Backoff
from pocketmq.client.message import SendResult

__all__ = ["ProducerConfig", "ProducerStatistics", "SendCallback"]

SendCallback = Callable[[SendResult | None, BaseException | None], None]
"""Called once a ``send_async`` ends: ``(result, None)`` or ``(None, error)``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProducerConfig:
    """How a producer sends.

    ``group`` is the producer group (required only for transactions: the broker checks unfinished
    transactions back with a producer of that group). A send is tried ``retries + 1`` times at
    most, all inside ``send_timeout`` seconds; flow-control refusals wait out ``backoff``.
    ``batching`` (on by default) sends what arrives while a send of the same topic is in flight
    as one request once it returns — no added latency; ``linger`` instead holds messages without
    a message group up to that many seconds to fill a batch of ``max_batch`` messages or
    ``max_batch_bytes`` bytes (docs/semantics.md, "Producer batching").
    ``max_message_size`` refuses bigger bodies before anything is sent.
    """

    group: str = ""
    retries: int = 2
    send_timeout: float = 3.0
    backoff: Backoff = field(default_factory=Backoff)
    batching: bool = True
    """Adaptive batching: messages that wait for an in-flight send of their topic leave together."""
    linger: float | None = None
    """Timed batching: wait up to this many seconds to fill a batch (None: adaptive or off)."""
    max_batch: int = 64
    """Messages per batch at most. Small enough that a producer with many sends outstanding
    has several requests in flight, so it and the broker work at the same time instead of
    taking turns (docs/benchmarks.md, "Batch size and overlap"); the broker joins the requests
    of one read into one append anyway."""
    max_batch_bytes: int = 4 * 1024 * 1024
    max_message_size: int = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class ProducerStatistics:
    """Counts since the producer was created, to tell a healthy producer from a struggling one.

    ``sent`` and ``failed`` count messages; ``retries`` counts attempts after the first;
    ``backoffs`` counts flow-control refusals waited out; ``unknown_outcomes`` counts messages
    whose send ended in :class:`~pocketmq.errors.SendOutcomeUnknownError`; ``batches`` counts
    send requests the brokers answered.
    """

    sent: int
    failed: int
    retries: int
    backoffs: int
    unknown_outcomes: int
    batches: int
