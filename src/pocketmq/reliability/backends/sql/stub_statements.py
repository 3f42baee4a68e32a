"""The SQL statements of a stub's life: selected, claimed, recorded, escalated, repaired.

Why statements are built apart from the backend that runs them: they *are* the rules of
docs/reliability.md ("The flow", "Resend scheduler and manual handling", "Operators") written in
SQL, and keeping them as pure functions of the table puts each rule in one readable place, next
to the memory backend's Python version of the same rule, and lets the backend deal only with
connections. Every update that hands out work is a compare-and-set, so several relays,
schedulers or Spark resend jobs can share one database.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Update,
    and_,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.types import DateTime

from pocketmq.client import SendResult
from pocketmq.reliability.schema import ReliabilityTables
from pocketmq.reliability.stub import (
    MANUAL_PREFIX,
    PENDING_STATUS_VALUES,
    MessageStub,
    StubStatus,
)

__all__ = [
    "claim",
    "clear_manual",
    "due_for_relay",
    "due_for_resend",
    "exhausted",
    "listed",
    "mark_manual",
    "operator_update",
    "record_send_failed",
    "record_sent",
    "reschedule_values",
]


def _not_alerted(stub: Table) -> ColumnElement[bool]:
    return or_(stub.c.last_error.is_(None), stub.c.last_error.not_like(f"{MANUAL_PREFIX}%"))


def _same_instant(column: Any, moment: datetime, dialect: str) -> ColumnElement[bool]:
    """``column = moment`` as instants, however the row's writer formatted the timestamp.

    SQLite keeps timestamps as text: SQLAlchemy writes ``... 12:00:00.000000``, other clients
    ``... 12:00:00``, and a text comparison would call the same instant different (a stub written
    by another program could then never be claimed). ``julianday`` compares the instants, to
    the millisecond — the claim moves times by seconds, never less.
    """
    if dialect == "sqlite":
        return func.julianday(column) == func.julianday(literal(moment, DateTime()))
    return column == moment  # type: ignore[no-any-return]


def listed(
    stub: Table, *, status: StubStatus | None, alerted: bool | None, limit: int
) -> Select[Any]:
    """Stubs by creation time, optionally of one status and alerted or not (``outbox list``)."""
    statement = select(stub)
    if status is not None:
        statement = statement.where(stub.c.status == status.value)
    if alerted is True:
        statement = statement.where(stub.c.last_error.like(f"{MANUAL_PREFIX}%"))
    elif alerted is False:
        statement = statement.where(_not_alerted(stub))
    return statement.order_by(stub.c.created_at, stub.c.message_id).limit(limit)


def due_for_relay(stub: Table, now: datetime, *, limit: int) -> Select[Any]:
    """Never-sent stubs that are due, oldest first: the relay's work."""
    return (
        select(stub)
        .where(
            stub.c.status == StubStatus.UNCONFIRMED.value,
            stub.c.send_count == 0,
            stub.c.next_resend_at <= now,
        )
        .order_by(stub.c.created_at, stub.c.message_id)
        .limit(limit)
    )


def due_for_resend(
    tables: ReliabilityTables,
    now: datetime,
    *,
    max_sends: int,
    group: str | None,
    offset_wait: float | None,
    limit: int,
) -> Select[Any]:
    """The resend rule of docs/reliability.md "Resend scheduler and manual handling"."""
    stub, log = tables.stub, tables.log
    logged = log.alias("logged")
    passed = log.alias("passed")
    in_log: ColumnElement[bool] = logged.c.message_id == stub.c.message_id
    same_queue: ColumnElement[bool] = and_(
        passed.c.topic == stub.c.topic,
        passed.c.broker_name == stub.c.broker_name,
        passed.c.queue_id == stub.c.queue_id,
    )
    if group is not None:
        in_log = and_(in_log, logged.c.consumer_group == group)
        same_queue = and_(same_queue, passed.c.consumer_group == group)
    max_logged = select(func.max(passed.c.queue_offset)).where(same_queue).scalar_subquery()
    offset_ok = [stub.c.queue_offset.is_(None), stub.c.queue_offset < max_logged]
    if offset_wait is not None:
        offset_ok.append(stub.c.next_resend_at <= now - timedelta(seconds=offset_wait))
    return (
        select(stub)
        .where(
            stub.c.status.in_(PENDING_STATUS_VALUES),
            stub.c.send_count < max_sends,
            stub.c.next_resend_at <= now,
            ~exists().where(in_log),
            or_(*offset_ok),
        )
        .order_by(stub.c.next_resend_at, stub.c.message_id)
        .limit(limit)
    )


def claim(
    table: Table, seen: MessageStub, *, until: datetime, now: datetime, dialect: str
) -> Update:
    """Push ``next_resend_at`` to ``until`` if the stub is still as ``seen`` and pending."""
    return (
        update(table)
        .where(
            table.c.message_id == seen.message_id,
            table.c.status.in_(PENDING_STATUS_VALUES),
            table.c.send_count == seen.send_count,
            _same_instant(table.c.next_resend_at, seen.next_resend_at, dialect),
        )
        .values(next_resend_at=until, updated_at=now)
    )


def record_sent(
    table: Table, message_id: str, result: SendResult, *, next_resend_at: datetime, now: datetime
) -> Update:
    """A stored send: count it, keep where it went, UNKNOWN becomes UNCONFIRMED."""
    return (
        update(table)
        .where(table.c.message_id == message_id)
        .values(
            status=case(
                (table.c.status == StubStatus.UNKNOWN.value, StubStatus.UNCONFIRMED.value),
                else_=table.c.status,
            ),
            send_count=table.c.send_count + 1,
            broker_name=result.broker_name,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            next_resend_at=next_resend_at,
            updated_at=now,
            last_error=None,
        )
    )


def record_send_failed(
    table: Table,
    message_id: str,
    *,
    outcome_unknown: bool,
    error: str,
    next_resend_at: datetime,
    now: datetime,
) -> Update:
    """A failed send counts too; one that may have been stored makes a pending stub UNKNOWN."""
    status: Any = table.c.status
    if outcome_unknown:
        status = case(
            (table.c.status.in_(PENDING_STATUS_VALUES), StubStatus.UNKNOWN.value),
            else_=table.c.status,
        )
    return (
        update(table)
        .where(table.c.message_id == message_id)
        .values(
            status=status,
            send_count=table.c.send_count + 1,
            next_resend_at=next_resend_at,
            updated_at=now,
            last_error=error,
        )
    )


def exhausted(stub: Table, now: datetime, *, max_sends: int, limit: int) -> Select[Any]:
    """Pending stubs out of sends, past their last resend time, not yet alerted."""
    return (
        select(stub)
        .where(
            stub.c.status.in_(PENDING_STATUS_VALUES),
            stub.c.send_count >= max_sends,
            stub.c.next_resend_at <= now,
            _not_alerted(stub),
        )
        .order_by(stub.c.next_resend_at, stub.c.message_id)
        .limit(limit)
    )


def mark_manual(stub: Table, message_id: str, note: str, now: datetime) -> Update:
    """Hand the stub to manual handling once: a compare-and-set on the ``manual:`` marker."""
    return (
        update(stub)
        .where(stub.c.message_id == message_id, _not_alerted(stub))
        .values(last_error=f"{MANUAL_PREFIX} {note}", updated_at=now)
    )


def clear_manual(stub: Table, message_id: str, restore: str | None, now: datetime) -> Update:
    """Take the manual marker back (every alert hook failed: the next run tries again)."""
    return (
        update(stub)
        .where(stub.c.message_id == message_id, stub.c.last_error.like(f"{MANUAL_PREFIX}%"))
        .values(last_error=restore, updated_at=now)
    )


def reschedule_values(now: datetime) -> dict[str, Any]:
    """``pocketmq outbox resend``: due now, a fresh budget of sends, no stored position."""
    return {
        "status": StubStatus.UNCONFIRMED.value,
        "send_count": 0,
        "broker_name": None,
        "queue_id": None,
        "queue_offset": None,
        "next_resend_at": now,
        "updated_at": now,
        "last_error": None,
    }


def operator_update(stub: Table, message_id: str, values: dict[str, Any]) -> Update:
    """An operator's change to a stub that is not CONFIRMED (a confirmed message is done)."""
    return (
        update(stub)
        .where(stub.c.message_id == message_id, stub.c.status != StubStatus.CONFIRMED.value)
        .values(**values)
    )
