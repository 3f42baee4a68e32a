"""The root click group and the options every command shares.

The command families live in their own modules, imported only when one of their commands runs
(:class:`LazyGroup`): ``pocketmq send`` must not import the broker, the store, Spark, SQLAlchemy
or rich, which made every invocation pay ~0.2 s of imports (docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["COMMAND_MODULES", "DEFAULT_SERVER", "LazyGroup", "main", "server_option"]

DEFAULT_SERVER = "127.0.0.1:10911"

F = TypeVar("F", bound=Callable[..., Any])


def server_option(func: F) -> F:
    """``--server H:P``, defaulting to ``$POCKETMQ_SERVER`` and then 127.0.0.1:10911."""
    return click.option(
        "--server",
        default=lambda: os.environ.get("POCKETMQ_SERVER", DEFAULT_SERVER),
        show_default="$POCKETMQ_SERVER or 127.0.0.1:10911",
        help="Broker address host:port.",
    )(func)


# Each top-level command and the module that registers it on :data:`main`.
COMMAND_MODULES: dict[str, str] = {
    "bench": "pocketmq.cli.bench",
    "topic": "pocketmq.cli.commands",
    "group": "pocketmq.cli.commands",
    "send": "pocketmq.cli.commands",
    "consume": "pocketmq.cli.commands",
    "message": "pocketmq.cli.deadletter",
    "dlq": "pocketmq.cli.deadletter",
    "export": "pocketmq.cli.export",
    "outbox": "pocketmq.cli.outbox",
    "pipeline": "pocketmq.cli.pipeline",
    "serve": "pocketmq.cli.serve",
    "namesrv": "pocketmq.cli.serve",
    "store": "pocketmq.cli.store",
    "broker": "pocketmq.cli.store",
}


class LazyGroup(click.Group):
    """A group whose commands are imported from :data:`COMMAND_MODULES` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(COMMAND_MODULES[cmd_name])  # registers itself on main
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pocketmq")
def main() -> None:
    """pocketmq: a reliable message broker modelled on Apache RocketMQ."""
