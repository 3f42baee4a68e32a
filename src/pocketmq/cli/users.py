"""``pocketmq user create|update|delete|list``: the broker's users, edited in its data directory
(docs/security.md, "Authentication"); a running broker picks the change up within a second."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import click

from pocketmq.cli._app import main
from pocketmq.errors import InvalidArgumentError
from pocketmq.server.auth.users import USER_TYPES, UserStore

_DATA_DIR = click.option(
    "--data-dir", default="./data", show_default=True, help="The broker's data directory."
)


def _store(data_dir: str) -> UserStore:
    return UserStore(os.path.join(data_dir, "config"))


@main.group()
def user() -> None:
    """Users with access keys (authentication): create, update, delete and list them."""


@user.command("create")
@click.argument("access_key")
@click.option("--secret", help="The secret key (default: a random one, printed once).")
@click.option(
    "--type",
    "user_type",
    type=click.Choice(USER_TYPES),
    default="normal",
    show_default=True,
    help="super: may do everything; normal: what `pocketmq acl` rules allow.",
)
@_DATA_DIR
def user_create(access_key: str, secret: str | None, user_type: str, data_dir: str) -> None:
    """Add a user; prints its secret key (keep it: it is not shown again)."""
    try:
        made = _store(data_dir).create(access_key, secret, user_type)
    except InvalidArgumentError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(made if secret is None else f"user {access_key} created")


@user.command("update")
@click.argument("access_key")
@click.option("--secret", help="A new secret key.")
@click.option(
    "--type",
    "user_type",
    type=click.Choice(USER_TYPES),
    help="super: may do everything; normal: what `pocketmq acl` rules allow.",
)
@_DATA_DIR
def user_update(access_key: str, secret: str | None, user_type: str | None, data_dir: str) -> None:
    """Change a user's secret key or type."""
    try:
        _store(data_dir).update(access_key, secret=secret, user_type=user_type)
    except InvalidArgumentError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"user {access_key} updated")


@user.command("delete")
@click.argument("access_key")
@_DATA_DIR
def user_delete(access_key: str, data_dir: str) -> None:
    """Remove a user: its signed requests are refused from the next second on."""
    if not _store(data_dir).delete(access_key):
        raise click.ClickException(f"no user {access_key}")
    click.echo(f"user {access_key} deleted")


@user.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per user.")
@_DATA_DIR
def user_list(as_json: bool, data_dir: str) -> None:
    """Every user: access key, type, creation time (never a secret)."""
    store = _store(data_dir)
    store.load()
    for item in store.users():
        created = datetime.fromtimestamp(item.created_at, UTC).isoformat(timespec="seconds")
        if as_json:
            click.echo(json.dumps({"access_key": item.access_key, "type": item.user_type,
                                   "created_at": created}))  # fmt: skip
        else:
            click.echo(f"{item.access_key}\t{item.user_type}\t{created}")
