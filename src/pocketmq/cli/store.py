"""``pocketmq store check``, ``pocketmq store repair`` and ``pocketmq broker status``: the
operator's tools for a damaged store (docs/storage-format.md §7, docs/operations.md).

``check`` verifies every record of a data directory and lists what is damaged and which queued
messages that costs; it reads only, so it may run beside a live broker. ``repair`` (broker
stopped) sets damaged bytes aside in ``store/quarantine/`` and keeps every intact record, which
is what a broker refusing to start after damage to acknowledged data asks for.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from pocketmq.cli._app import main, server_option
from pocketmq.cli.commands import handle_errors
from pocketmq.cli.output import print_table
from pocketmq.cli.serve import build_config, given
from pocketmq.client.sync import SyncAdmin
from pocketmq.errors import PocketMQError
from pocketmq.store import MessageStore, RecoveryMode, StoreConfig
from pocketmq.store.check import CheckReport, check_store

__all__ = ["store"]


def _settings(data_dir: str | None, config_file: Path | None) -> tuple[str, StoreConfig]:
    """The store directory and the store settings the broker runs with (its TOML file)."""
    broker = build_config(config_file, broker=given(data_dir=data_dir)).broker
    return os.path.join(broker.data_dir, "store"), dataclasses.replace(
        broker.store, fault_file=None
    )


_data_dir = click.option("--data-dir", help="The broker's data directory.  [default: ./data]")
_config = click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, path_type=Path),
    help="The broker's TOML file (its [store] settings must match the data).",
)


@main.group()
def store() -> None:
    """A broker's message store on disk: check (verify every record) and repair."""


@store.command()
@_data_dir
@_config
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def check(data_dir: str | None, config_file: Path | None, as_json: bool) -> None:
    """Verify every record; exit 1 when damage is found that is not set aside yet."""
    directory, config = _settings(data_dir, config_file)
    try:
        report = check_store(directory, config)
    except (OSError, PocketMQError) as exc:
        raise click.ClickException(f"cannot check {directory}: {exc}") from None
    if as_json:
        click.echo(json.dumps(_as_json(report)))
    else:
        _print(report, directory)
    if not report.healthy:
        raise SystemExit(1)


@store.command()
@_data_dir
@_config
def repair(data_dir: str | None, config_file: Path | None) -> None:
    """Set damaged bytes aside and keep every intact record (the broker must be stopped); a
    slave then copies them again from its master (docs/replication.md §4)."""
    directory, config = _settings(data_dir, config_file)
    config = dataclasses.replace(config, recovery=RecoveryMode.QUARANTINE)
    try:
        with MessageStore.open(directory, config) as opened:
            report = opened.recovery_report
    except (OSError, RuntimeError, PocketMQError) as exc:
        raise click.ClickException(f"cannot repair {directory}: {exc}") from None
    if not report.set_aside:
        click.echo("nothing to repair: every record verifies")
        return
    for item in report.set_aside:
        click.echo(
            f"set aside {item.kind} bytes {item.start}-{item.end} ({item.reason}); "
            f"{len(item.lost)} queued message(s) lost; saved as "
            f"{os.path.join(directory, 'quarantine', item.saved) if item.saved else '-'}"
        )
        for lost in item.lost:
            click.echo(f"  lost {lost.topic}/{lost.queue_id} offset {lost.queue_offset}")
    if any(item.kind == "damaged" for item in report.set_aside):
        click.echo(
            "a slave copies the damaged records, and everything after them, again from its "
            "master once it is linked (until then it is not in sync and cannot be promoted "
            "without --force); a master keeps every intact record around them"
        )
    click.echo("the broker can be started again")


def _print(report: CheckReport, directory: str) -> None:
    click.echo(
        f"{directory}: {report.records} records verified, log {report.log_start}-{report.log_end}"
    )
    for damage, lost in report.damage:
        where = "tail" if damage.tail else "inside the log"
        click.echo(
            f"DAMAGED bytes {damage.start}-{damage.end} ({where}: {damage.reason}); "
            f"{len(lost)} queued message(s) there"
        )
        for entry in lost:
            click.echo(f"  {entry.topic}/{entry.queue_id} offset {entry.queue_offset}")
    for item in report.quarantined:
        click.echo(
            f"set aside earlier: {item.kind} bytes {item.start}-{item.end} ({item.reason}), "
            f"{len(item.lost)} message(s)"
        )
    if report.damage:
        click.echo("stop the broker and run `pocketmq store repair` to set the damage aside")
    else:
        click.echo("ok")


def _as_json(report: CheckReport) -> dict[str, object]:
    return {
        "records": report.records,
        "log_start": report.log_start,
        "log_end": report.log_end,
        "healthy": report.healthy,
        "damage": [
            {
                "start": damage.start,
                "end": damage.end,
                "tail": damage.tail,
                "reason": damage.reason,
                "lost": [[e.topic, e.queue_id, e.queue_offset] for e in lost],
            }
            for damage, lost in report.damage
        ],
        "quarantined": [
            {"start": q.start, "end": q.end, "kind": q.kind, "reason": q.reason}
            for q in report.quarantined
        ],
    }


@main.group()
def broker() -> None:
    """A running broker: its status (everything it reports), its stats (the figures an
    operator watches, per broker) and promote (make a slave the master of its group)."""


@broker.command()
@server_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per broker, one per line.")
@handle_errors
def status(server: str, as_json: bool) -> None:
    """Everything each broker reports: counters, store state and replication (slaves
    included), as indented JSON; --json prints one object per line, for programs."""
    with SyncAdmin(servers=server) as admin:
        for item in admin.run(lambda a: a.broker_status()):
            record = {
                "broker": item.broker_name,
                "address": item.address,
                "version": item.version,
                "counters": item.counters,
                "store": item.store,
                "replication": item.replication,
            } | ({"error": item.error} if item.error else {})
            click.echo(json.dumps(record) if as_json else json.dumps(record, indent=2))


_STATS = (
    ("messages stored", "store", "messages_put"),
    ("bytes stored", "store", "bytes_put"),
    ("messages delivered", "counters", "messages_out"),
    ("pop acks", "counters", "acks"),
    ("handed back for retry", "counters", "sent_back"),
    ("dead-lettered", "counters", "dead_lettered"),
    ("transactions pending", "counters", "transactions_pending"),
    ("commit log end", "store", "write_position"),
    ("flushed up to", "store", "flushed_position"),
    ("segments", "store", "segments"),
    ("consume queues", "store", "queues"),
    ("fsyncs", "store", "fsyncs"),
    ("damaged records read", "store", "damaged_records_read"),
    ("replication lag (bytes)", "replication", "lag_bytes"),
    ("in-sync slaves", "replication", "in_sync"),
)


@broker.command()
@server_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per broker.")
@handle_errors
def stats(server: str, as_json: bool) -> None:
    """The figures an operator watches, one column per broker (slaves included)."""
    from rich.table import Table

    with SyncAdmin(servers=server) as admin:
        brokers = admin.run(lambda a: a.broker_status())
    sections = [
        {"counters": b.counters, "store": b.store, "replication": b.replication} for b in brokers
    ]
    if as_json:
        for b, section in zip(brokers, sections, strict=True):
            figures = {label: section[part].get(key, 0) for label, part, key in _STATS}
            line = {"broker": b.broker_name, "address": b.address, "version": b.version}
            role = str(b.replication.get("role", "master"))
            click.echo(
                json.dumps(line | {"role": role, "flush_mode": b.store.get("flush_mode")} | figures)
            )
        return
    table = Table(show_edge=False)
    table.add_column("")
    for b in brokers:
        table.add_column(
            f"{b.broker_name} {b.replication.get('role', '')}\n{b.address}", justify="right"
        )
    table.add_row("version", *(b.version for b in brokers))
    table.add_row("store", *(_store_state(b.store) for b in brokers))
    for label, part, key in _STATS:
        table.add_row(label, *(f"{s[part].get(key, 0):,}" for s in sections))
    print_table(table)


def _store_state(store: Mapping[str, Any]) -> str:
    """Why the store refuses writes (a failure, a full disk: docs/operations.md), or ok."""
    if store.get("failure"):
        return str(store["failure"])
    if store.get("refusing_writes"):
        return f"refusing writes: {store['refusing_writes']}"
    return "ok"


@broker.command()
@server_option
@click.option("--force", is_flag=True, help="Promote even a slave not known to be in sync.")
@handle_errors
def promote(server: str, force: bool) -> None:
    """Make the slave at --server the master of its group (docs/replication.md §6)."""
    with SyncAdmin(servers=server) as admin:
        result = admin.run(lambda a: a.promote(force=force))
    click.echo(
        f"{result.address} is the master now (epoch {result.epoch}, log end {result.log_end})"
    )
