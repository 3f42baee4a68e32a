"""The message log in SQL: receipts written as one upsert per batch, and pruning that keeps the
rows the resend rule still needs.

Why receipts are an upsert: a receipt is written for every delivery, duplicates included, and is
committed on its own before the handler runs (docs/reliability.md "Consumer: the idempotent
wrapper", step 1). One multi-row ``INSERT ... ON CONFLICT`` per batch is one round trip and one
commit instead of N; each database spells the upsert differently, so the three dialects get their
own statement and anything else a portable insert-or-update per row.

Why pruning keeps rows: the resend rule compares a stub's offset with the highest offset logged on
its queue, and a log-only consumer's row is what stops a pending stub from being resent
(docs/reliability.md "Deviations", 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, exists, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pocketmq.client import MessageView
from pocketmq.reliability.backends.sql.engine import single_statement
from pocketmq.reliability.schema import ReliabilityTables
from pocketmq.reliability.stub import PENDING_STATUS_VALUES, LogEntry, LogStatus

__all__ = ["log_receipts", "prune_log"]

#: Rows deleted per DELETE statement when pruning (keeps each statement's text bounded).
_PRUNE_CHUNK = 500


def _receipt_rows(
    group: str, messages: Sequence[MessageView], now: datetime
) -> list[dict[str, Any]]:
    """One row per message id; an id twice in the batch counts two receipts in one row.

    An upsert may not touch a row twice, and rows sorted by id make concurrent batches lock
    rows in the same order (no deadlock between two consumers of overlapping batches).
    """
    copies = Counter(m.message_id for m in messages)
    first = {m.message_id: m for m in reversed(messages)}
    return [
        {
            "consumer_group": group,
            "message_id": message_id,
            "topic": first[message_id].topic,
            "broker_name": first[message_id].broker_name,
            "queue_id": first[message_id].queue_id,
            "queue_offset": first[message_id].queue_offset,
            "status": LogStatus.RECEIVED.value,
            "receive_count": copies[message_id],
            "created_at": now,
            "consumed_at": None,
        }
        for message_id in sorted(copies)
    ]


async def log_receipts(
    engine: AsyncEngine,
    tables: ReliabilityTables,
    group: str,
    messages: Sequence[MessageView],
    now: datetime,
) -> list[LogEntry]:
    """Upsert the receipts of a batch; the entries in the order of ``messages``."""
    if not messages:
        return []
    rows = _receipt_rows(group, messages, now)
    dialect = engine.dialect.name
    if dialect in ("postgresql", "sqlite", "mysql", "mariadb"):
        async with single_statement(engine) as conn:
            found = await _upsert(conn, dialect, tables, group, rows)
    else:
        found = [await _insert_or_bump(engine, tables, group, row) for row in rows]
    entries = {entry.message_id: entry for entry in found}
    return [entries[m.message_id] for m in messages]


async def _upsert(
    conn: AsyncConnection,
    dialect: str,
    tables: ReliabilityTables,
    group: str,
    rows: list[dict[str, Any]],
) -> list[LogEntry]:
    log = tables.log
    keys = [log.c.consumer_group, log.c.message_id]
    if dialect == "mysql" or dialect == "mariadb":
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        mysql_statement = mysql_insert(log).values(rows)
        await conn.execute(
            mysql_statement.on_duplicate_key_update(
                receive_count=log.c.receive_count + mysql_statement.inserted.receive_count
            )
        )
        # MySQL has no RETURNING: read the rows back in the same connection.
        ids = [row["message_id"] for row in rows]
        reread = select(log).where(log.c.consumer_group == group, log.c.message_id.in_(ids))
        result = (await conn.execute(reread)).mappings().all()
        return [LogEntry.from_row(row) for row in result]
    inserted: Any
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        inserted = postgresql_insert(log).values(rows)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        inserted = sqlite_insert(log).values(rows)
    statement = inserted.on_conflict_do_update(
        index_elements=keys,
        set_={"receive_count": log.c.receive_count + inserted.excluded.receive_count},
    ).returning(*log.c)
    result = (await conn.execute(statement)).mappings().all()
    return [LogEntry.from_row(row) for row in result]


async def _insert_or_bump(
    engine: AsyncEngine, tables: ReliabilityTables, group: str, values: dict[str, Any]
) -> LogEntry:
    """Insert, or bump on conflict, for dialects without an upsert we know."""
    log = tables.log
    where = (log.c.consumer_group == group, log.c.message_id == values["message_id"])
    async with engine.begin() as conn:
        try:
            async with conn.begin_nested():
                await conn.execute(insert(log).values(**values))
        except IntegrityError:
            bump = log.c.receive_count + values["receive_count"]
            await conn.execute(update(log).where(*where).values(receive_count=bump))
        row = (await conn.execute(select(log).where(*where))).mappings().one()
        return LogEntry.from_row(row)


async def prune_log(
    engine: AsyncEngine, tables: ReliabilityTables, *, older_than: datetime, group: str | None
) -> int:
    """Delete old CONSUMED rows except each queue's highest and those of pending stubs."""
    log, stub = tables.log, tables.stub
    top = log.alias("top")
    higher = log.alias("higher")
    # a row is the highest of its queue when no row of the same queue has a larger offset
    is_highest = ~exists().where(
        higher.c.consumer_group == top.c.consumer_group,
        higher.c.topic == top.c.topic,
        higher.c.broker_name == top.c.broker_name,
        higher.c.queue_id == top.c.queue_id,
        higher.c.queue_offset > top.c.queue_offset,
    )
    conditions: list[ColumnElement[bool]] = [
        log.c.status == LogStatus.CONSUMED.value,
        log.c.consumed_at < older_than,
        # While the message's stub is pending, its log row is what keeps the resend rule
        # from sending it again (log-only consumers never confirm stubs).
        ~exists().where(
            stub.c.message_id == log.c.message_id, stub.c.status.in_(PENDING_STATUS_VALUES)
        ),
    ]
    if group is not None:
        conditions.append(log.c.consumer_group == group)
    async with engine.begin() as conn:
        # MySQL cannot reference the table being deleted from in a subquery, so the rows to
        # keep are read first (one per queue: cheap) and excluded by key.
        keep = (
            await conn.execute(select(top.c.consumer_group, top.c.message_id).where(is_highest))
        ).all()
        doomed = select(log.c.consumer_group, log.c.message_id).where(*conditions)
        candidates = (await conn.execute(doomed)).all()
        kept = {(g, m) for g, m in keep}
        victims = [(g, m) for g, m in candidates if (g, m) not in kept]
        for start in range(0, len(victims), _PRUNE_CHUNK):
            chunk = victims[start : start + _PRUNE_CHUNK]
            await conn.execute(
                delete(log).where(
                    or_(*(and_(log.c.consumer_group == g, log.c.message_id == m) for g, m in chunk))
                )
            )
    return len(victims)
