"""``pocketmq group``, ``send`` and ``consume`` (docs/cli.md; ``topic``: cli/topics.py).

Every command talks to a broker through the SDK. Errors are printed to stderr and exit non-zero;
``--json`` output is one JSON object per line, for scripts. The SDK and rich are imported inside
the commands: ``pocketmq send`` loads the producer only (docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from pocketmq.cli._app import main, parse_duration, server_option
from pocketmq.cli.output import print_table
from pocketmq.client.message import Message, MessageView, SendResult
from pocketmq.errors import PocketMQError, TopicNotFoundError
from pocketmq.protocol.checks import MAX_RETRY_MULTIPLIER

__all__ = ["handle_errors", "message_json", "parse_when"]

F = TypeVar("F", bound=Callable[..., Any])


def parse_when(text: str) -> int:
    """An ISO-8601 time (UTC unless it says otherwise) as milliseconds since the epoch; a clear
    usage error otherwise."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def handle_errors(func: F) -> F:
    """Turn pocketmq errors into a clean message on stderr and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except PocketMQError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return wrapper  # type: ignore[return-value]


def message_json(message: MessageView) -> dict[str, Any]:
    """The stable ``--json`` shape of a message (docs/cli.md, "--json")."""
    out: dict[str, Any] = {
        "message_id": message.message_id,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
    }
    try:
        out["body"] = message.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body"] = base64.b64encode(message.body).decode()
        out["body_encoding"] = "base64"
    out.update(
        tag=message.tag,
        keys=list(message.keys),
        message_group=message.message_group,
        delivery_attempt=message.delivery_attempt,
        born_timestamp=message.born_timestamp,
        store_timestamp=message.store_timestamp,
    )
    if message.properties:
        out["properties"] = dict(message.properties)
    return out


# -- groups ---------------------------------------------------------------------------------


@main.group()
def group() -> None:
    """Create, list, inspect (status: consumers, offsets, lag), reset-offset and delete consumer
    groups (on every broker of the cluster)."""


@group.command("create")
@click.argument("name")
@click.option("--fifo", is_flag=True, help="Consume in order, one message group at a time.")
@click.option(
    "--max-retries",
    default=16,
    show_default=True,
    type=click.IntRange(-1, 1000),
    help="Retries before the dead-letter queue (-1: never give up).",
)
@click.option("--retry-delays", help="Comma-separated delays, e.g. 1s,5s,30s (default: levels 3+).")
@click.option(
    "--retry-exponential", help="INITIAL,MULTIPLIER,MAX e.g. 1s,2,10m (exponential policy)."
)
@click.option("--broadcast", is_flag=True, help="Every consumer gets every message.")
@click.option(
    "--consume-from",
    default="first",
    show_default=True,
    type=click.Choice(["first", "last"]),
    help="Where a new group starts on a queue: its oldest message, or after its newest.",
)
@server_option
@handle_errors
def group_create(
    name: str,
    fifo: bool,
    max_retries: int,
    retry_delays: str | None,
    retry_exponential: str | None,
    broadcast: bool,
    consume_from: str,
    server: str,
) -> None:
    """Create (or update) a consumer group and its retry policy."""
    from pocketmq.client.sync import SyncAdmin

    delays = tuple(parse_duration(p) for p in retry_delays.split(",")) if retry_delays else ()
    initial = multiplier = maximum = 0.0
    if retry_exponential:
        parts = retry_exponential.split(",")
        if len(parts) != 3:
            raise click.BadParameter(
                "expected INITIAL,MULTIPLIER,MAX", param_hint="--retry-exponential"
            )
        try:
            multiplier = float(parts[1])
        except ValueError:
            multiplier = math.nan
        if not 1 <= multiplier <= MAX_RETRY_MULTIPLIER:  # also refuses nan
            raise click.BadParameter(
                f"the multiplier {parts[1]!r} must be a number from 1 to {MAX_RETRY_MULTIPLIER:g}",
                param_hint="--retry-exponential",
            )
        initial, maximum = parse_duration(parts[0]), parse_duration(parts[2])
    with SyncAdmin(servers=server) as admin:
        admin.create_group(
            name,
            fifo=fifo,
            max_retries=max_retries,
            retry_delays=delays,
            broadcast=broadcast,
            consume_from=consume_from,
            retry_initial=initial,
            retry_multiplier=multiplier or 2.0,
            retry_max=maximum,
        )
    click.echo(f"group {name} created")


@group.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even while consumers are connected.")
@server_option
@handle_errors
def group_delete(name: str, force: bool, server: str) -> None:
    """Delete consumer group NAME on every broker (its offsets and retry policy go with it)."""
    from pocketmq.client.sync import SyncAdmin

    with SyncAdmin(servers=server) as admin:
        online = admin.run(lambda a: a.consumers(name))
        if online and not force:
            raise click.ClickException(
                f"group {name} has {len(online)} connected consumer(s) "
                f"({', '.join(online[:3])}{', ...' if len(online) > 3 else ''}); "
                "stop them first, or use --force"
            )
        admin.run(lambda a: a.delete_group(name))
    click.echo(f"deleted group {name}")


@group.command("status")
@click.argument("name")
@click.option("--topic", "topics", multiple=True, help="Only these topics (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue.")
@server_option
@handle_errors
def group_status(name: str, topics: tuple[str, ...], as_json: bool, server: str) -> None:
    """Consumers of group NAME, and per queue its committed offset and lag (every topic it has
    progress on, its retry topic included, unless --topic names them)."""
    from pocketmq.client.sync import SyncAdmin

    with SyncAdmin(servers=server) as admin:
        consumers = admin.run(lambda a: a.consumers(name))
        names = list(topics) or [t.name for t in admin.list_topics()]
        rows = []
        # the retry topic is listed once, whether list_topics named it or not
        for topic in dict.fromkeys([*names, *([] if topics else [f"%RETRY%{name}"])]):
            try:
                queues = admin.queues(topic, name)
            except TopicNotFoundError:
                continue
            if not topics and all(q.committed_offset < 0 for q in queues):
                continue  # the group never consumed this topic
            rows += [(topic, q) for q in queues]
    if as_json:
        for topic, q in rows:
            record = {
                "topic": topic,
                "broker": q.broker_name,
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "committed_offset": q.committed_offset,
                "lag": q.lag,
            }
            click.echo(json.dumps(record))
        return
    click.echo(f"group {name}: {len(consumers)} consumer(s) connected")
    for client_id in consumers:
        click.echo(f"  {client_id}")
    click.echo(f"{'TOPIC':30} {'BROKER':12} {'QUEUE':>5} {'COMMITTED':>10} {'MAX':>10} {'LAG':>8}")
    for topic, q in rows:
        click.echo(
            f"{topic:30} {q.broker_name:12} {q.queue_id:>5} {q.committed_offset:>10} "
            f"{q.max_offset:>10} {q.lag:>8}"
        )
    click.echo(f"total lag: {sum(q.lag for _, q in rows)}")


@group.command("reset-offset")
@click.argument("name")
@click.option("--topic", required=True, help="The topic whose offsets move.")
@click.option("--to-time", "to_time", help="ISO-8601 time (UTC unless it says otherwise).")
@click.option("--to-earliest", is_flag=True, help="The oldest message kept.")
@click.option("--to-latest", is_flag=True, help="Past the newest message: skip the backlog.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue.")
@server_option
@handle_errors
def group_reset_offset(
    name: str,
    topic: str,
    to_time: str | None,
    to_earliest: bool,
    to_latest: bool,
    as_json: bool,
    server: str,
) -> None:
    """Move group NAME's offsets on --topic to a time, the earliest or the latest message.
    Consumers may stay online: they continue from the new offsets (docs/operations.md)."""
    from pocketmq.client.sync import SyncAdmin

    if sum((to_time is not None, to_earliest, to_latest)) != 1:
        raise click.UsageError("give exactly one of --to-time, --to-earliest, --to-latest")
    at_ms = parse_when(to_time) if to_time is not None else 0
    to = "time" if to_time is not None else "earliest" if to_earliest else "latest"
    with SyncAdmin(servers=server) as admin:
        moves = admin.run(lambda a: a.reset_offset(name, topic, to=to, at_ms=at_ms))
    if as_json:
        for m in moves:
            record = {"broker": m.broker_name, "queue_id": m.queue_id}
            click.echo(json.dumps(record | {"before": m.before, "after": m.after}))
        return
    click.echo(f"{'BROKER':12} {'QUEUE':>5} {'BEFORE':>10} {'AFTER':>10}")
    for m in moves:
        click.echo(f"{m.broker_name:12} {m.queue_id:>5} {m.before:>10} {m.after:>10}")
    click.echo(f"group {name} reset on {topic} ({len(moves)} queues)")


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
@server_option
@handle_errors
def group_list(as_json: bool, server: str) -> None:
    """List consumer groups."""
    from pocketmq.client.sync import SyncAdmin

    with SyncAdmin(servers=server) as admin:
        groups = admin.list_groups()
    if as_json:
        for g in groups:
            record = {
                "name": g.name,
                "fifo": g.fifo,
                "broadcast": g.broadcast,
                "max_retries": g.max_retries,
                "retry_delays": list(g.retry_delays),
                "consume_from": g.consume_from,
            }
            click.echo(json.dumps(record))
        return
    from rich.table import Table

    table = Table("group", "fifo", "broadcast", "max retries", "retry delays", "consume from")
    for g in groups:
        delays = ",".join(f"{d:g}s" for d in g.retry_delays) or "levels 3+"
        table.add_row(
            g.name, str(g.fifo), str(g.broadcast), str(g.max_retries), delays, g.consume_from
        )
    print_table(table)


# -- send and consume -----------------------------------------------------------------------


async def _send_one(server: str, message: Message) -> SendResult:
    from pocketmq.client.producer import Producer  # not the blocking facade: no loop thread

    async with Producer(servers=server) as producer:
        return await producer.send(message)


@main.command()
@click.argument("topic")
@click.argument("body")
@click.option("--tag", help="The message's tag: consumers filter on it (--filter 'A || B').")
@click.option("--key", "keys", multiple=True, help="Business key (repeatable).")
@click.option("--message-group", help="FIFO message group.")
@click.option("--delay", help="Deliver after this long, e.g. 5s.")
@click.option("--property", "properties", multiple=True, help="NAME=VALUE (repeatable).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the result as one JSON object (id, queue...)."
)
@server_option
@handle_errors
def send(
    topic: str,
    body: str,
    tag: str | None,
    keys: tuple[str, ...],
    message_group: str | None,
    delay: str | None,
    properties: tuple[str, ...],
    as_json: bool,
    server: str,
) -> None:
    """Send one message (BODY is UTF-8 text; use - to read it from stdin)."""
    # bytes the shell passed that are not UTF-8 come back as they were (surrogateescape)
    payload = sys.stdin.buffer.read() if body == "-" else body.encode("utf-8", "surrogateescape")
    extra: dict[str, str] = {}
    for item in properties:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--property")
        extra[name] = value
    message = Message(
        topic=topic,
        body=payload,
        tag=tag,
        keys=keys,
        properties=extra,
        message_group=message_group,
        delivery_time=time.time() + parse_duration(delay) if delay else None,
    )
    result = asyncio.run(_send_one(server, message))
    if as_json:
        record = {
            "message_id": result.message_id,
            "topic": result.topic,
            "queue_id": result.queue_id,
            "queue_offset": result.queue_offset,
            "broker": result.broker_name,
            "status": result.status.value,
        }
        click.echo(json.dumps(record))
    else:
        where = (
            f"queue {result.queue_id} offset {result.queue_offset}"
            if result.queue_offset >= 0
            else "scheduled"
        )
        weaker = "" if result.status.value == "OK" else f", status {result.status.value}"
        click.echo(f"sent {result.message_id} to {result.topic} ({where}{weaker})")


@main.command()
@click.argument("topic")
@click.option("--group", "group_name", required=True, help="Consumer group.")
@click.option("--count", type=click.IntRange(1), help="Stop after this many messages.")
@click.option(
    "--timeout", default="10s", show_default=True, help="Stop when nothing arrives for this long."
)
@click.option(
    "--filter", "expression", default="*", show_default=True, help="Tag filter, e.g. 'A || B'."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@click.option("--no-ack", is_flag=True, help="Leave the messages unacknowledged (peek).")
@server_option
@handle_errors
def consume(
    topic: str,
    group_name: str,
    count: int | None,
    timeout: str,
    expression: str,
    as_json: bool,
    no_ack: bool,
    server: str,
) -> None:
    """Receive messages (and acknowledge them) as a member of GROUP."""
    from pocketmq.client.sync import SyncSimpleConsumer

    idle = parse_duration(timeout)
    received = 0
    wait = min(idle, 20.0)
    with SyncSimpleConsumer(
        group_name, {topic: expression}, servers=server, await_duration=wait
    ) as consumer:
        quiet_since = time.monotonic()
        while count is None or received < count:
            want = min(32, count - received) if count else 32
            messages = consumer.receive(want, invisible_duration=30.0)
            if not messages:
                if time.monotonic() - quiet_since >= idle:
                    break
                continue
            quiet_since = time.monotonic()
            for message in messages:
                if as_json:
                    click.echo(json.dumps(message_json(message), ensure_ascii=False))
                else:
                    click.echo(_line(message))
            if not no_ack:
                consumer.ack_many(messages)
            received += len(messages)
    if not as_json:
        click.echo(f"{received} message(s)", err=True)


def _line(message: MessageView) -> str:
    body = message.body.decode("utf-8", errors="replace")
    tag = f" tag={message.tag}" if message.tag else ""
    keys = f" keys={','.join(message.keys)}" if message.keys else ""
    group = f" group={message.message_group}" if message.message_group else ""
    return (
        f"{message.message_id} {message.topic}[{message.queue_id}]@{message.queue_offset}"
        f" attempt={message.delivery_attempt}{tag}{keys}{group}: {body}"
    )
