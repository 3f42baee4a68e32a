"""The root click group and the options every command shares.

The command families live in their own modules, imported only when one of their commands runs
(:class:`LazyGroup`): ``pocketmq send`` must not import the broker, the store, Spark, SQLAlchemy
or rich, which made every invocation pay ~0.2 s of imports (docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = [
    "COMMAND_MODULES",
    "DEFAULT_SERVER",
    "DURATION",
    "LazyGroup",
    "main",
    "parse_duration",
    "server_option",
]

DEFAULT_SERVER = "127.0.0.1:10911"

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``"10s"``, ``"1.5m"``, ``"2h"``, ``"500ms"``, ``"7d"`` or plain seconds → seconds.

    Every command reads durations with this one function, so ``--delay``, ``--stuck-after`` and
    ``--older-than`` accept the same spellings; the value must be finite and >= 0 (``nan``,
    ``inf`` and ``1e400`` are refused here rather than failing deep in the SDK or a Spark job).
    """
    value = text.strip().lower()
    seconds: float | None = None
    for unit in ("ms", "s", "m", "h", "d"):
        if value.endswith(unit):
            with contextlib.suppress(ValueError):
                seconds = float(value[: -len(unit)]) * _UNITS[unit]
            break
    if seconds is None:
        with contextlib.suppress(ValueError):
            seconds = float(value)
    if seconds is None or not 0 <= seconds < math.inf:
        raise click.BadParameter(
            f"{text!r} is not a duration: a number and a unit, e.g. 500ms, 45s, 30m, 12h, 7d"
        )
    return seconds


class _Duration(click.ParamType[float, Any]):
    """A click option type for :func:`parse_duration` (seconds as a float)."""

    name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Seconds from ``value`` (already a number when it is an option's default)."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        try:
            return parse_duration(str(value))
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)


DURATION = _Duration()


def _checked_servers(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--server`` as given, once every address in it is ``host:port`` (several may be listed,
    separated by commas): a missing port is a usage error (exit 2), found before any connection
    is tried, not an SDK error (exit 1) after it."""
    parts = [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]
    if not parts:
        raise click.BadParameter("no address given: expected host:port", ctx, param)
    for part in parts:
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(
                f"{part!r} is not host:port (e.g. 127.0.0.1:10911; a name server: 127.0.0.1:9876)",
                ctx,
                param,
            )
    return value


def server_option(func: F) -> F:
    """``--server H:P``, defaulting to ``$POCKETMQ_SERVER`` and then 127.0.0.1:10911."""
    return click.option(
        "--server",
        default=lambda: os.environ.get("POCKETMQ_SERVER", DEFAULT_SERVER),
        show_default="$POCKETMQ_SERVER or 127.0.0.1:10911",
        callback=_checked_servers,
        help="Broker (or name server) address host:port; several separated by commas.",
    )(func)


# Each top-level command and the module that registers it on :data:`main`.
COMMAND_MODULES: dict[str, str] = {
    "bench": "pocketmq.cli.bench",
    "cluster": "pocketmq.cli.cluster",
    "topic": "pocketmq.cli.topics",
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
    "proxy": "pocketmq.cli.proxy",
    "store": "pocketmq.cli.store",
    "broker": "pocketmq.cli.store",
    "user": "pocketmq.cli.users",
    "acl": "pocketmq.cli.acl",
}


class LazyGroup(click.Group):
    """A group whose commands are imported from :data:`COMMAND_MODULES` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, including those whose module is not imported yet (for --help)."""
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, importing the module that registers it the first time it is asked for."""
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(COMMAND_MODULES[cmd_name])  # registers itself on main
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pocketmq")
def main() -> None:
    """pocketmq: a reliable message broker modelled on Apache RocketMQ."""
