"""What goes into the store and what comes out of it.

``StoreMessage`` is the broker's request; ``StoredMessage`` a decoded record. Both are msgspec
structs: cheap to build in the hot path and immutable once built.
"""

from __future__ import annotations

import msgspec

from pocketmq import properties as props
from pocketmq.store.status import GetStatus, PutStatus

__all__ = ["GetResult", "PutResult", "QueueEntry", "StoreMessage", "StoredMessage"]


class StoreMessage(msgspec.Struct, frozen=True, gc=False):
    """A message to append. The store assigns the queue offset and the physical offset.

    ``properties`` carries the message id (``UNIQ_KEY``), ``KEYS`` and ``TAGS`` among the broker's
    own properties. ``born_host`` is already packed (see :func:`pocketmq.store.pack_host`).
    ``tag_code`` overrides the consume-queue tag slot (the broker's schedule queues keep the due
    time there).
    """

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = {}
    flags: int = 0
    born_timestamp: int = 0
    born_host: bytes = b""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tag_code: int | None = None


class StoredMessage(msgspec.Struct, frozen=True, gc=False):
    """A record read back from the commit log."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    flags: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    tag_code: int = 0

    @property
    def message_id(self) -> str:
        """The producer's message id (``UNIQ_KEY``), kept across retries; "" for a record without
        one."""
        return self.properties.get(props.MESSAGE_ID, "")

    @property
    def tag(self) -> str | None:
        """The message's tag, or None."""
        return self.properties.get(props.TAGS) or None

    @property
    def keys(self) -> tuple[str, ...]:
        """The business keys, stored space-separated in one property."""
        raw = self.properties.get(props.KEYS)
        return tuple(raw.split()) if raw else ()


class PutResult(msgspec.Struct, frozen=True, gc=False):
    """One appended message: where it went, or why it did not."""

    status: PutStatus
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    physical_offset: int = -1
    size: int = 0
    store_timestamp: int = 0
    reason: str = ""


class QueueEntry(msgspec.Struct, frozen=True, gc=False):
    """A consume-queue entry: where the n-th message of a queue lives."""

    queue_offset: int
    physical_offset: int
    size: int
    tag_code: int


class GetResult(msgspec.Struct, frozen=True, gc=False):
    """Messages read from one queue.

    ``next_offset`` is where the next read should start; ``min_offset``/``max_offset`` bound the
    queue (``max_offset`` is the offset the next appended message will get).
    """

    status: GetStatus
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int
