"""``pocketmq acl grant|revoke|list``: authorization rules, edited in the broker's data directory
(docs/security.md, "Authorization"); a running broker picks the change up within a second."""

from __future__ import annotations

import json
import os

import click

from pocketmq.cli._app import main
from pocketmq.errors import InvalidArgumentError
from pocketmq.server.auth.acl import AclStore, make_rule

_DATA_DIR = click.option(
    "--data-dir", default="./data", show_default=True, help="The broker's data directory."
)


def _store(data_dir: str) -> AclStore:
    return AclStore(os.path.join(data_dir, "config"))


def _split(text: str) -> list[str]:
    return [part for part in text.replace(" ", ",").split(",") if part]


@main.group()
def acl() -> None:
    """Who may do what: grant, revoke and list rules for users on topics, groups and the
    cluster."""


@acl.command("grant")
@click.argument("access_key")
@click.argument("resource")
@click.option("--actions", required=True, help="Pub,Sub,Create,Update,Delete,Get,List or All.")
@click.option("--deny", is_flag=True, help="A Deny rule instead of Allow.")
@click.option("--source", "sources", multiple=True, help="Only from this IP network (repeatable).")
@_DATA_DIR
def acl_grant(
    access_key: str,
    resource: str,
    actions: str,
    deny: bool,
    sources: tuple[str, ...],
    data_dir: str,
) -> None:
    """Allow (or --deny) ACCESS_KEY the --actions on RESOURCE: Topic:NAME, Group:NAME or
    Cluster:NAME, with NAME exact, a prefix ending in '*', or '*'."""
    try:
        rule = make_rule(access_key, resource, _split(actions), allow=not deny, sources=sources)
        _store(data_dir).grant(rule)
    except InvalidArgumentError as exc:
        raise click.ClickException(str(exc)) from None
    verb = "denied" if deny else "allowed"
    click.echo(
        f"{access_key} {verb} {','.join(sorted(a.value for a in rule.actions))} on {resource}"
    )


@acl.command("revoke")
@click.argument("access_key")
@click.argument("resource")
@click.option("--actions", default="", help="Only these actions (default: the whole rule).")
@_DATA_DIR
def acl_revoke(access_key: str, resource: str, actions: str, data_dir: str) -> None:
    """Remove ACCESS_KEY's rules on RESOURCE (or only some of their actions)."""
    try:
        changed = _store(data_dir).revoke(access_key, resource, _split(actions))
    except InvalidArgumentError as exc:
        raise click.ClickException(str(exc)) from None
    if not changed:
        raise click.ClickException(f"{access_key} has no rule on {resource}")
    click.echo(f"revoked {changed} rule(s) of {access_key} on {resource}")


@acl.command("list")
@click.option("--user", "access_key", help="Only this user's rules.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per rule.")
@_DATA_DIR
def acl_list(access_key: str | None, as_json: bool, data_dir: str) -> None:
    """Every rule: user, resource, actions, decision, sources."""
    store = _store(data_dir)
    try:
        store.load()
    except (InvalidArgumentError, ValueError, KeyError) as exc:
        raise click.ClickException(f"acl.json cannot be read: {exc}") from None
    for rule in store.rules(access_key):
        record = rule.to_json()
        if as_json:
            click.echo(json.dumps(record))
        else:
            sources = ",".join(rule.sources) or "anywhere"
            actions = ",".join(sorted(a.value for a in rule.actions))
            click.echo(f"{rule.user}\t{rule.resource}\t{actions}\t{record['decision']}\t{sources}")
