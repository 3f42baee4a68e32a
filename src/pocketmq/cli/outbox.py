"""``pocketmq outbox``: look at and repair message stubs (docs/reliability.md "Operators").

The commands talk to the database only, never to a broker: ``resend`` makes a stub due now with
a fresh send budget and leaves the sending to the relay / resend scheduler of the application that
owns the outbox. SQLAlchemy is imported inside the commands, so ``pocketmq --help`` works without
the ``sql`` extra installed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from pocketmq.cli._app import DURATION, main
from pocketmq.reliability.database_url import DEFAULT_DATABASE_URL

__all__ = ["outbox"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_STATUSES = ("UNCONFIRMED", "CONFIRMED", "VOID", "UNKNOWN", "MANUAL")


def _db_options(func: F) -> F:
    func = click.option(
        "--table-prefix",
        default="",
        show_default=True,
        help="Prefix of the message_stub / message_log table names.",
    )(func)
    return click.option(
        "--url",
        default=lambda: os.environ.get("POCKETMQ_OUTBOX_URL", DEFAULT_DATABASE_URL),
        show_default=f"$POCKETMQ_OUTBOX_URL or {DEFAULT_DATABASE_URL}",
        help="Database URL (sqlite:///..., postgresql+psycopg://..., mysql+pymysql://...).",
    )(func)


def _run(url: str, table_prefix: str, action: Callable[[Any], Awaitable[T]]) -> T:
    """Open the backend, run ``action(backend)`` on a fresh event loop, close it."""
    from pocketmq.reliability.backends.sql import SqlBackend
    from pocketmq.reliability.errors import ReliabilityError

    async def go() -> T:
        backend = SqlBackend.from_url(url, table_prefix=table_prefix)
        try:
            return await action(backend)
        finally:
            await backend.aclose()

    try:
        return asyncio.run(go())
    except ReliabilityError as exc:
        raise click.ClickException(str(exc)) from exc


def _stub_json(stub: Any) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        return None if value is None else value.isoformat() + "Z"

    return {
        "message_id": stub.message_id,
        "topic": stub.topic,
        "tag": stub.tag,
        "keys": list(stub.keys),
        "status": stub.status.value,
        "manual": stub.alerted,
        "send_count": stub.send_count,
        "broker_name": stub.broker_name,
        "queue_id": stub.queue_id,
        "queue_offset": stub.queue_offset,
        "next_resend_at": iso(stub.next_resend_at),
        "created_at": iso(stub.created_at),
        "updated_at": iso(stub.updated_at),
        "last_error": stub.last_error,
        "body": stub.content.decode("utf-8", errors="replace"),
    }


@main.group("outbox")
def outbox() -> None:
    """Outbox message stubs (the reliability toolkit's tables): init-db, list, resend, void
    and prune-log."""


@outbox.command("init-db")
@_db_options
def init_db(url: str, table_prefix: str) -> None:
    """Create the message_stub and message_log tables if they do not exist."""

    async def action(backend: Any) -> None:
        await backend.create_schema()

    _run(url, table_prefix, action)
    click.echo(f"tables ready: {table_prefix}message_stub, {table_prefix}message_log")


@outbox.command("list")
@_db_options
@click.option(
    "--status",
    type=click.Choice(_STATUSES, case_sensitive=False),
    help="Only stubs in this status; MANUAL = handed to manual handling (alerted).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="At most this many stubs.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_stubs(url: str, table_prefix: str, status: str | None, limit: int, as_json: bool) -> None:
    """List stubs, oldest first."""
    from pocketmq.reliability.stub import StubStatus

    async def action(backend: Any) -> list[Any]:
        if status is not None and status.upper() == "MANUAL":
            return list(await backend.list_stubs(alerted=True, limit=limit))
        wanted = None if status is None else StubStatus(status.upper())
        return list(await backend.list_stubs(status=wanted, limit=limit))

    stubs = _run(url, table_prefix, action)
    if as_json:
        for stub in stubs:
            click.echo(json.dumps(_stub_json(stub)))
        return
    if not stubs:
        click.echo("no stubs")
        return
    click.echo(f"{'MESSAGE ID':<34} {'STATUS':<11} {'SENDS':>5}  {'TOPIC':<20} WHERE / LAST ERROR")
    for stub in stubs:
        where = (
            f"{stub.broker_name}:{stub.queue_id}@{stub.queue_offset}"
            if stub.queue_offset is not None
            else "-"
        )
        note = f"  {stub.last_error}" if stub.last_error else ""
        click.echo(
            f"{stub.message_id:<34} {stub.status.value:<11} {stub.send_count:>5}  "
            f"{stub.topic:<20} {where}{note}"
        )


@outbox.command("resend")
@_db_options
@click.argument("message_id")
def resend(url: str, table_prefix: str, message_id: str) -> None:
    """Make a stub due now with a fresh send budget.

    This marks the stub UNCONFIRMED with send_count 0 and next_resend_at = now; it does not send
    anything itself. The outbox relay / resend scheduler of the application that owns the outbox
    sends it on its next run, with the same message id (consumers deduplicate).
    """
    from pocketmq.reliability.clock import utcnow

    async def action(backend: Any) -> Any:
        return await backend.reschedule_stub(message_id, utcnow())

    stub = _run(url, table_prefix, action)
    click.echo(f"{stub.message_id} is due now ({stub.status.value}, send budget reset)")


@outbox.command("void")
@_db_options
@click.argument("message_id")
def void(url: str, table_prefix: str, message_id: str) -> None:
    """Stop resending a stub (status VOID). A consumer that still receives it confirms it."""
    from pocketmq.reliability.clock import utcnow

    async def action(backend: Any) -> Any:
        return await backend.void_stub(message_id, utcnow())

    stub = _run(url, table_prefix, action)
    click.echo(f"{stub.message_id} is {stub.status.value}")


@outbox.command("prune-log")
@_db_options
@click.option(
    "--older-than",
    "older_than",
    required=True,
    type=DURATION,
    help="Delete CONSUMED message-log rows consumed longer ago than this (45s, 30m, 12h, 7d).",
)
@click.option("--group", default=None, help="Only this consumer group's rows.")
def prune_log(url: str, table_prefix: str, older_than: float, group: str | None) -> None:
    """Delete old CONSUMED message-log rows (the highest offset per queue is always kept)."""
    from pocketmq.reliability.clock import utcnow

    cutoff = utcnow() - timedelta(seconds=older_than)

    async def action(backend: Any) -> int:
        return int(await backend.prune_log(older_than=cutoff, group=group))

    removed = _run(url, table_prefix, action)
    click.echo(f"removed {removed} message-log rows")
