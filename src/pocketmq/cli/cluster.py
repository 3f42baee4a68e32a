"""``pocketmq cluster list``: every broker of every group, its role and epoch, and what the
failover controller knows of it (docs/replication.md §9, docs/cli.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from pocketmq.cli._app import main, server_option
from pocketmq.cli.commands import handle_errors
from pocketmq.client.sync import SyncAdmin

_COLUMNS = (
    "group", "id", "address", "role", "version", "uptime", "disk_free", "epoch", "log_end",
    "controller", "lease", "isr", "status",
)  # fmt: skip


def _size(count: int) -> str:
    if count < 0:
        return "?"
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return f"{count}B"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


@main.group()
def cluster() -> None:
    """The brokers of a cluster: list them with their roles, epochs and failover state; manage
    the cluster key its members prove to each other (key create, rotate, prune)."""


def _row(item: Any) -> dict[str, Any]:
    replication = dict(item.replication)
    controller = dict(replication.get("controller") or {})
    lease = controller.get("lease_remaining")
    return {
        "group": item.broker_name,
        "id": replication.get("broker_id", ""),
        "address": item.address,
        "role": replication.get("role", ""),
        # "unreachable": it did not answer (down, or frozen): its role is the name server's
        "status": "unreachable" if item.error else "ok",
        "error": item.error,
        "version": item.version,
        "uptime": "" if item.error else _duration(item.uptime_seconds),
        "uptime_seconds": item.uptime_seconds,
        "disk_free": _size(int(item.store.get("disk_free_bytes", -1))),
        "disk_free_bytes": int(item.store.get("disk_free_bytes", -1)),
        "disk_total_bytes": int(item.store.get("disk_total_bytes", -1)),
        "epoch": replication.get("epoch", 0),
        "log_end": replication.get("log_end", 0),
        "controller": controller.get("state", "none"),
        "lease": "" if lease is None else f"{lease:.1f}s",
        "isr": ",".join(str(i) for i in controller.get("isr", [])),
        "failovers": controller.get("failovers", 0),
        "last_failover_seconds": controller.get("last_failover_seconds", 0.0),
    }


@cluster.command("list")
@server_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per broker.")
@handle_errors
def cluster_list(server: str, as_json: bool) -> None:
    """Every broker: group, id, role, version, uptime, free disk, epoch, log end, controller
    state, lease left, in-sync set, and whether it answered (a broker that does not is listed
    "unreachable", with its role as the name server lists it).

    Ask a name server (or any broker of the cluster) with --server."""
    with SyncAdmin(servers=server) as admin:
        items = admin.run(lambda a: a.broker_status())
    rows = sorted((_row(item) for item in items), key=lambda r: (r["group"], str(r["id"])))
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in _COLUMNS}
    click.echo("  ".join(c.upper().ljust(widths[c]) for c in _COLUMNS).rstrip())
    for row in rows:
        click.echo("  ".join(str(row[c]).ljust(widths[c]) for c in _COLUMNS).rstrip())


@cluster.group("key")
def key() -> None:
    """The cluster key: how brokers, name servers and proxies prove they belong to the cluster
    (docs/security.md, "Trust inside the cluster"): create one, rotate it (a new secret, the old
    ones still accepted), prune the old ones once every member has the new one."""


def _key_command(action: Any, done: str) -> Any:
    from pocketmq.errors import InvalidArgumentError

    def run(path: str) -> None:
        try:
            found = action(path)
        except InvalidArgumentError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(done.format(path=path, count=len(found.secrets)))

    return run


@key.command("create")
@click.argument("path", type=click.Path(dir_okay=False))
def key_create(path: str) -> None:
    """Write a new key to PATH (mode 0600; an existing file is never overwritten). Give every
    broker, name server and proxy of the cluster a copy."""
    from pocketmq.server.auth.cluster import create_cluster_key

    _key_command(create_cluster_key, "created {path}: copy it (mode 0600) to every component")(path)


@key.command("rotate")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
def key_rotate(path: str) -> None:
    """Put a new key first in PATH, keeping the old ones accepted: copy the file to every
    component (each re-reads it within a second), then `pocketmq cluster key prune PATH`."""
    from pocketmq.server.auth.cluster import create_cluster_key, load_cluster_key

    def rotate(where: str) -> Any:
        return create_cluster_key(where, keep=load_cluster_key(where).secrets)

    _key_command(rotate, "rotated {path}: {count} keys accepted, the new one signs")(path)


@key.command("prune")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
def key_prune(path: str) -> None:
    """Keep only PATH's first key (once every component has the rotated file)."""
    from pocketmq.server.auth.cluster import prune_cluster_key

    _key_command(prune_cluster_key, "pruned {path}: only the newest key is accepted")(path)
