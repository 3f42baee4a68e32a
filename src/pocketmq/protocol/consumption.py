"""Consumption: pull, pop and its acknowledgements and invisibility changes, offsets, and
the queue locks of orderly consumers.
"""

from __future__ import annotations

from pocketmq.protocol.body import Body
from pocketmq.protocol.messages import Delivered

__all__ = [
    "AckEntry",
    "AckRequest",
    "AckResponse",
    "ChangeInvisibleRequest",
    "ChangeInvisibleResponse",
    "CommitOffsetRequest",
    "LockQueuesRequest",
    "LockQueuesResponse",
    "OffsetEntry",
    "PopRequest",
    "PopResponse",
    "PullRequest",
    "PullResponse",
    "QueryOffsetRequest",
    "QueryOffsetResponse",
    "QueueRef",
]


class PullRequest(Body, frozen=True):
    """Read a queue from an offset the consumer keeps itself (push consumers, 4.x style);
    ``max_wait_ms`` turns an empty read into a long poll."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int = 32
    expression: str = "*"
    max_wait_ms: int = 0


class PullResponse(Body, frozen=True):
    """The messages read and where to read next: after ``OFFSET_ILLEGAL`` (an offset that fell out
    of retention) ``next_offset`` is the nearest valid one, so a consumer moves on instead of
    failing; ``min_offset``/``max_offset`` are the queue's range, for lag."""

    status: str  # FOUND | NO_NEW_MESSAGE | NO_MATCHED_MESSAGE | OFFSET_ILLEGAL
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[Delivered] = []


class PopRequest(Body, frozen=True):
    """Take messages from any queue of a topic and hide them for ``invisible_ms`` (simple consumers,
    5.x style); a retry with the same ``attempt_id`` gets the same messages."""

    group: str
    topic: str
    max_count: int = 32
    invisible_ms: int = 30_000
    max_wait_ms: int = 0
    expression: str = "*"
    queue_hint: int = -1
    consumer: str = ""
    attempt_id: str = ""


class PopResponse(Body, frozen=True):
    """The messages taken, each with the receipt handle that acknowledges or re-hides it."""

    messages: list[Delivered]


class AckEntry(Body, frozen=True):
    """One popped message to acknowledge, named by its topic and receipt handle."""

    topic: str
    receipt_handle: str


class AckRequest(Body, frozen=True):
    """Acknowledge popped messages in one request; each entry succeeds or fails on its own."""

    group: str
    entries: list[AckEntry]
    consumer: str = ""


class AckResponse(Body, frozen=True):
    """One result code per entry (and its reason), so a stale handle fails only its own message."""

    codes: list[int]
    remarks: list[str] = []


class ChangeInvisibleRequest(Body, frozen=True):
    """Hide a popped message again for ``invisible_ms`` (a nack with a delay); ``error`` is recorded
    in the message's attempt history."""

    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int
    error: str = ""
    consumer: str = ""


class ChangeInvisibleResponse(Body, frozen=True):
    """The message's new receipt handle: the old one is stale once the message was hidden again."""

    receipt_handle: str


class OffsetEntry(Body, frozen=True):
    """A consumer group's next offset to read in one queue."""

    topic: str
    queue_id: int
    offset: int


class CommitOffsetRequest(Body, frozen=True):
    """Commit a group's offsets in one request, all or nothing, so a bad entry cannot leave the
    table half updated."""

    group: str
    entries: list[OffsetEntry]


class QueueRef(Body, frozen=True):
    """One queue of a topic, the unit of an orderly consumer's lock."""

    topic: str
    queue_id: int


class LockQueuesRequest(Body, frozen=True):
    """An orderly consumer asks to own queues exclusively (and UNLOCK_QUEUES gives them back), so
    two members never consume one queue at the same time."""

    group: str
    client_id: str
    queues: list[QueueRef]


class LockQueuesResponse(Body, frozen=True):
    """The queues the client holds now; the others belong to another member until its locks
    expire."""

    granted: list[QueueRef]


class QueryOffsetRequest(Body, frozen=True):
    """Asks for a group's committed offset in one queue, where a consumer starts after a
    rebalance."""

    group: str
    topic: str
    queue_id: int


class QueryOffsetResponse(Body, frozen=True):
    """The committed offset, or -1 when the group has none (then its consume-from position
    applies)."""

    offset: int


class ForwardToDeadLetterRequest(Body, frozen=True):
    """Moves a popped message to its group's dead-letter queue now: a consumer that gave up on it
    after its own local retries (the official FIFO push consumers do)."""

    group: str
    topic: str
    receipt_handle: str
    reason: str = ""


class CancelRequest(Body, frozen=True):
    """One-way: the client gave up on its long poll ``request_id`` (a PULL or POP on this
    connection): the broker stops waiting, so no message is taken for a caller that is gone."""

    request_id: int
