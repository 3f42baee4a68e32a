"""Reading topics off the brokers by offset range, without consuming: what the export and the
Spark data source share.

Why not a consumer: a consumer group moves offsets, takes part in rebalancing and only sees the
topics it subscribes to. Exports and Spark jobs want something else — "every message of queue 3
on broker-a from offset 1200 to 1500", repeatable, with no side effect on any group — and they
want dead-letter topics and the broker's internal attempt history too. So this module asks each
broker for its queues' offset ranges (:meth:`Admin.queue_status`) and reads ranges in pages
(:meth:`Admin.browse`).

Everything here is blocking (:class:`~pocketmq.client.sync.SyncAdmin`): the callers are the CLI
and Spark tasks, which run in plain threads and processes. Nothing here keeps a connection beyond
the :class:`~pocketmq.client.sync.SyncAdmin` the caller opened, so Spark workers open their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa

from pocketmq import properties as props
from pocketmq.client import Admin, DeliveryAttempt, QueueInfo, StoredMessage
from pocketmq.client.sync import SyncAdmin
from pocketmq.errors import TopicNotFoundError
from pocketmq.pipeline.schemas import ATTEMPT_HISTORY_SCHEMA, TOPIC_EXPORT_SCHEMA

__all__ = [
    "COLUMN_PROPERTIES",
    "DEFAULT_PAGE_SIZE",
    "QueueSpan",
    "attempts_table",
    "browse_range",
    "messages_table",
    "queue_spans",
    "utc_date",
]

#: Messages per BROWSE request (the broker caps a page at 1024 messages and 4 MiB).
DEFAULT_PAGE_SIZE: Final = 512

#: Properties that have their own column in the export; every other property is kept in the
#: ``properties`` map (``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID`` and ``DLQ_REASON`` of dead letters).
COLUMN_PROPERTIES: Final = frozenset(
    {props.MESSAGE_ID, props.TAGS, props.KEYS, props.MESSAGE_GROUP}
)

_DAY_MS: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class QueueSpan:
    """One queue of a topic on one broker and the offsets it holds: ``[min_offset, max_offset)``."""

    broker_name: str
    address: str
    queue_id: int
    min_offset: int
    max_offset: int


def queue_spans(admin: SyncAdmin, topic: str, *, missing_ok: bool = False) -> list[QueueSpan]:
    """Every queue of ``topic`` on every broker of the cluster, sorted by broker and queue.

    Each broker is asked directly (:meth:`Admin.queue_status`), so topics without a route —
    dead-letter topics and the internal ``%SYS%HISTORY`` — work too. Brokers that do not have
    the topic are skipped; if none has it, :class:`TopicNotFoundError` (or ``[]`` with
    ``missing_ok``).
    """

    async def ask(admin_: Admin) -> list[QueueInfo]:
        try:
            return await admin_.queue_status(topic)
        except TopicNotFoundError:
            if missing_ok:
                return []
            raise

    return [
        QueueSpan(q.broker_name, q.address, q.queue_id, q.min_offset, q.max_offset)
        for q in admin.run(ask)
    ]


def browse_range(
    admin: SyncAdmin,
    address: str,
    topic: str,
    queue_id: int,
    start: int,
    end: int,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Iterator[list[StoredMessage]]:
    """Pages of the messages of one queue with ``start <= queue_offset < end``, in offset order.

    Offsets below the queue's minimum (removed by retention) are skipped silently; the pages
    then start at the first message still stored.
    """
    offset = start
    page_size = max(1, min(page_size, 1024))
    while offset < end:
        count = min(page_size, end - offset)

        async def read(
            admin_: Admin, offset: int = offset, count: int = count
        ) -> list[StoredMessage]:
            return await admin_.browse(
                topic, address=address, queue_id=queue_id, offset=offset, max_count=count
            )

        page = [m for m in admin.run(read) if offset <= m.queue_offset < end]
        if not page:
            return
        yield page
        offset = page[-1].queue_offset + 1


def utc_date(ms: int, _cache: dict[int, str] = {}) -> str:  # noqa: B006 (a deliberate cache)
    """``YYYY-MM-DD`` of an epoch-milliseconds instant in UTC."""
    day = ms // _DAY_MS
    text = _cache.get(day)
    if text is None:
        text = datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")
        if len(_cache) < 100_000:
            _cache[day] = text
    return text


def messages_table(messages: Iterable[StoredMessage], broker_name: str = "") -> pa.Table:
    """Messages as a table of :data:`~pocketmq.pipeline.schemas.TOPIC_EXPORT_SCHEMA`.

    ``topic`` is the topic the message is stored in (``%DLQ%<group>`` for a dead letter, whose
    original topic is property ``RETRY_TOPIC``); ``keys`` is space-separated; ``date`` is the
    UTC date of ``store_timestamp``.
    """
    cols: dict[str, list[Any]] = {name: [] for name in TOPIC_EXPORT_SCHEMA.names}
    for m in messages:
        p = m.properties
        cols["message_id"].append(p.get(props.MESSAGE_ID, ""))
        cols["topic"].append(m.topic)
        cols["queue_id"].append(m.queue_id)
        cols["queue_offset"].append(m.queue_offset)
        cols["body"].append(m.body)
        cols["tag"].append(p.get(props.TAGS) or None)
        cols["keys"].append(p.get(props.KEYS) or None)
        cols["message_group"].append(p.get(props.MESSAGE_GROUP) or None)
        cols["delivery_attempt"].append(m.delivery_attempt)
        cols["born_timestamp"].append(m.born_timestamp)
        cols["store_timestamp"].append(m.store_timestamp)
        cols["properties"].append([(k, v) for k, v in p.items() if k not in COLUMN_PROPERTIES])
        cols["broker_name"].append(m.broker_name or broker_name or None)
        cols["date"].append(utc_date(m.store_timestamp))
    return pa.table(cols, schema=TOPIC_EXPORT_SCHEMA)


def attempts_table(records: Iterable[DeliveryAttempt]) -> pa.Table:
    """Attempt records (the records of ``%SYS%HISTORY``, decoded with
    :meth:`DeliveryAttempt.from_ledger`) as a table of
    :data:`~pocketmq.pipeline.schemas.ATTEMPT_HISTORY_SCHEMA`.

    Empty texts (no consumer, no error, no FIFO group) become nulls, as the schema documents.
    """
    cols: dict[str, list[Any]] = {name: [] for name in ATTEMPT_HISTORY_SCHEMA.names}
    for a in records:
        cols["message_id"].append(a.message_id)
        cols["consumer_group"].append(a.group)
        cols["topic"].append(a.topic)
        cols["message_group"].append(a.message_group or None)
        cols["attempt"].append(a.attempt)
        cols["consumer"].append(a.consumer or None)
        cols["outcome"].append(a.outcome)
        cols["error"].append(a.error or None)
        cols["delivered_at"].append(a.delivered_at)
        cols["finished_at"].append(a.finished_at or None)
    return pa.table(cols, schema=ATTEMPT_HISTORY_SCHEMA)
