"""The root click group and the options every command shares."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["DEFAULT_SERVER", "main", "server_option"]

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pocketmq")
def main() -> None:
    """pocketmq: a reliable message broker modelled on Apache RocketMQ."""
