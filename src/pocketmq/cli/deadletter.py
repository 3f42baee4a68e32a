"""``pocketmq message show|history`` and ``pocketmq dlq list|show|resend``.

Dead letters are listed with where they came from and why they are there; ``resend`` re-sends the
chosen ones with their original message id, at a bounded rate, once each (the broker keeps an
audit record of every redrive and refuses to send the same dead letter twice).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import click
from rich.table import Table

from pocketmq.cli._app import main, server_option
from pocketmq.cli.commands import handle_errors, message_json, parse_when
from pocketmq.cli.output import print_table
from pocketmq.cli.progress import progress_bar
from pocketmq.client import Admin, DeadLetter, MessageView, RedriveReport
from pocketmq.client.sync import SyncAdmin
from pocketmq.protocol.limits import MAX_QUERY_RESULTS

__all__ = ["DeadLetterFilter"]


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


class DeadLetterFilter:
    """``key=K``, ``tag=T``, ``id=ID``, ``since=ISO``, ``until=ISO`` (all must match)."""

    def __init__(self, specs: tuple[str, ...]) -> None:
        self.keys: set[str] = set()
        self.tags: set[str] = set()
        self.ids: set[str] = set()
        self.since: int | None = None
        self.until: int | None = None
        for spec in specs:
            name, sep, value = spec.partition("=")
            if not sep or not value:
                raise click.BadParameter(f"{spec!r}: expected key=, tag=, id=, since= or until=")
            if name == "key":
                self.keys.add(value)
            elif name == "tag":
                self.tags.add(value)
            elif name == "id":
                self.ids.add(value)
            elif name == "since":
                self.since = parse_when(value)
            elif name == "until":
                self.until = parse_when(value)
            else:
                raise click.BadParameter(f"unknown filter {name!r}", param_hint="--filter")

    def __call__(self, letter: DeadLetter) -> bool:
        message = letter.message
        if self.keys and not self.keys & set(message.keys):
            return False
        if self.tags and message.tag not in self.tags:
            return False
        if self.ids and message.message_id not in self.ids:
            return False
        if self.since is not None and message.store_timestamp < self.since:
            return False
        return self.until is None or message.store_timestamp <= self.until


@main.group()
def message() -> None:
    """Look up messages: show one by id, query by business key, and its delivery history."""


@message.command("show")
@click.argument("message_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per stored copy.")
@server_option
@handle_errors
def message_show(message_id: str, as_json: bool, server: str) -> None:
    """Every stored copy of MESSAGE_ID (original, retries, dead letter)."""
    with SyncAdmin(servers=server) as admin:
        copies = admin.run(lambda a: a.query_message(message_id))
    if not copies:
        raise click.ClickException(f"no message {message_id} on any broker")
    _print_messages(copies, as_json)


def _print_messages(messages: list[MessageView], as_json: bool, *, with_id: bool = False) -> None:
    """One line per message: JSON (cli.md), or where it is, when, and the start of its body."""
    for copy in messages:
        if as_json:
            click.echo(json.dumps(message_json(copy), ensure_ascii=False))
            continue
        body = copy.body.decode("utf-8", errors="replace")
        where = f"{copy.topic}[{copy.queue_id}]@{copy.queue_offset}"
        click.echo(
            f"{copy.message_id + ' ' if with_id else ''}{where} stored "
            f"{_time(copy.store_timestamp)} attempt={copy.delivery_attempt} "
            f"tag={copy.tag or '-'} keys={','.join(copy.keys) or '-'} body={body[:200]!r}"
        )


@message.command("query")
@click.option("--topic", required=True, help="The topic the messages were sent to.")
@click.option("--key", required=True, help="A business key the messages were sent with.")
@click.option(
    "--max",
    "max_count",
    default=32,
    show_default=True,
    type=click.IntRange(1, MAX_QUERY_RESULTS),
    help=f"At most this many per broker (a broker answers at most {MAX_QUERY_RESULTS}).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@server_option
@handle_errors
def message_query(topic: str, key: str, max_count: int, as_json: bool, server: str) -> None:
    """The messages of --topic sent with business key --key (at most --max per broker)."""
    with SyncAdmin(servers=server) as admin:
        found = admin.run(lambda a: a.query_by_key(topic, key, max_count))
    if not found:
        raise click.ClickException(f"no message of {topic} with key {key}")
    _print_messages(found, as_json, with_id=True)


@message.command("history")
@click.argument("message_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per attempt.")
@server_option
@handle_errors
def message_history(message_id: str, as_json: bool, server: str) -> None:
    """Every recorded delivery attempt of MESSAGE_ID, oldest first."""
    with SyncAdmin(servers=server) as admin:
        attempts = admin.run(lambda a: a.message_history(message_id))
    if as_json:
        for a in attempts:
            click.echo(
                json.dumps(
                    {
                        "message_id": a.message_id,
                        "group": a.group,
                        "topic": a.topic,
                        "attempt": a.attempt,
                        "consumer": a.consumer,
                        "outcome": a.outcome,
                        "error": a.error,
                        "delivered_at": a.delivered_at,
                        "finished_at": a.finished_at,
                    }
                )
            )
        return
    if not attempts:
        click.echo(f"no recorded attempts for {message_id}", err=True)
        return
    table = Table("delivered", "finished", "group", "attempt", "outcome", "consumer", "error")
    for a in attempts:
        table.add_row(
            _time(a.delivered_at),
            _time(a.finished_at),
            a.group,
            str(a.attempt),
            a.outcome,
            a.consumer,
            a.error,
        )
    print_table(table)


@main.group()
def dlq() -> None:
    """Dead-letter queues: list and show their messages (with the error that killed each),
    resend them."""


@dlq.command("list")
@click.argument("group")
@click.option(
    "--filter", "filters", multiple=True, help="key=K, tag=T, id=ID, since=ISO, until=ISO"
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per dead letter.")
@server_option
@handle_errors
def dlq_list(group: str, filters: tuple[str, ...], as_json: bool, server: str) -> None:
    """Messages in %DLQ%GROUP (JSON: the consume --json objects, plus origin and reason)."""
    selected = DeadLetterFilter(filters)
    with SyncAdmin(servers=server) as admin:
        letters = [d for d in admin.run(lambda a: a.dead_letters(group)) if selected(d)]
    if as_json:
        for letter in letters:
            record = message_json(letter.message)
            record.update(
                origin_topic=letter.origin_topic, reason=letter.reason, dlq_offset=letter.dlq_offset
            )
            click.echo(json.dumps(record, ensure_ascii=False))
        return
    table = Table("dlq offset", "message id", "origin topic", "stored", "attempts", "reason")
    for letter in letters:
        m = letter.message
        table.add_row(
            str(letter.dlq_offset),
            m.message_id,
            letter.origin_topic,
            _time(m.store_timestamp),
            str(m.delivery_attempt),
            letter.reason,
        )
    print_table(table)
    click.echo(f"{len(letters)} dead letter(s) in %DLQ%{group}", err=True)


@dlq.command("show")
@click.argument("group")
@click.argument("message_id")
@server_option
@handle_errors
def dlq_show(group: str, message_id: str, server: str) -> None:
    """One dead letter in full, with its delivery history."""
    with SyncAdmin(servers=server) as admin:
        letters = [
            d
            for d in admin.run(lambda a: a.dead_letters(group))
            if d.message.message_id == message_id
        ]
        history = admin.run(lambda a: a.message_history(message_id))
    if not letters:
        raise click.ClickException(f"{message_id} is not in %DLQ%{group}")
    for letter in letters:
        record = message_json(letter.message)
        record.update(
            origin_topic=letter.origin_topic, reason=letter.reason, dlq_offset=letter.dlq_offset
        )
        click.echo(json.dumps(record, ensure_ascii=False, indent=2))
    for a in history:
        click.echo(
            f"  {_time(a.delivered_at)} attempt {a.attempt} {a.outcome} {a.consumer} {a.error}"
        )


def _redrive(
    address: str, group: str, offsets: list[int], target: str
) -> Callable[[Admin], Awaitable[RedriveReport]]:
    def call(admin: Admin) -> Awaitable[RedriveReport]:
        return admin.redrive(address, group, offsets, target=target)

    return call


@dlq.command("resend")
@click.argument("group")
@click.option(
    "--filter", "filters", multiple=True, help="key=K, tag=T, id=ID, since=ISO, until=ISO"
)
@click.option(
    "--rate", type=click.FloatRange(min=0.01), help="At most this many messages per second."
)
@click.option(
    "--target",
    type=click.Choice(["origin", "retry"]),
    default="origin",
    show_default=True,
    help="origin: the original topic (all its groups); retry: only GROUP (%RETRY%GROUP).",
)
@click.option("--dry-run", is_flag=True, help="Show what would be resent, send nothing.")
@server_option
@handle_errors
def dlq_resend(
    group: str,
    filters: tuple[str, ...],
    rate: float | None,
    target: str,
    dry_run: bool,
    server: str,
) -> None:
    """Resend dead letters of GROUP with their original message ids, each at most once."""
    selected = DeadLetterFilter(filters)
    with SyncAdmin(servers=server) as admin:
        letters = [d for d in admin.run(lambda a: a.dead_letters(group)) if selected(d)]
        if dry_run:
            for letter in letters:
                click.echo(f"would resend {letter.message.message_id} to {letter.origin_topic}")
            click.echo(f"{len(letters)} message(s) match (dry run: nothing sent)", err=True)
            return
        batch = max(1, min(64, int(rate))) if rate else 64
        interval = batch / rate if rate else 0.0
        with progress_bar("resending", len(letters)) as advance:
            resent, skipped, failed = _resend_all(
                admin, group, letters, target, batch, interval, advance
            )
    click.echo(f"resent {resent}, already resent before {skipped}, failed {failed}", err=True)
    if failed:
        raise SystemExit(1)


def _resend_all(
    admin: SyncAdmin,
    group: str,
    letters: list[DeadLetter],
    target: str,
    batch: int,
    interval: float,
    advance: Callable[[int, str], None],
) -> tuple[int, int, int]:
    """Resend ``letters`` ``batch`` at a time, ``interval`` seconds apart (the rate); counts of
    resent, already resent before, and failed."""
    resent = skipped = failed = 0
    for start in range(0, len(letters), batch):
        began = time.monotonic()
        chunk = letters[start : start + batch]
        by_address: dict[str, list[int]] = {}
        for letter in chunk:
            by_address.setdefault(letter.address, []).append(letter.dlq_offset)
        for address, offsets in by_address.items():
            reply = admin.run(_redrive(address, group, offsets, target))
            for item in reply.items:
                if item.status == "resent":
                    resent += 1
                    click.echo(f"resent {item.message_id} -> {item.topic}[{item.queue_id}]")
                elif item.status == "already":
                    skipped += 1
                else:
                    failed += 1
                    click.echo(
                        f"failed {item.message_id or item.dlq_offset}: {item.status}", err=True
                    )
        advance(len(chunk), f"resent {resent}, failed {failed}")
        pause = interval - (time.monotonic() - began)
        if pause > 0:
            time.sleep(pause)
    return resent, skipped, failed
