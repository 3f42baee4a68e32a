"""What ``pocketmq --help`` says, checked against what the commands do (issue 29 item 16):
a command family's description names every command it has, every option says what it is for,
and the limits the help states are the code's."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pocketmq.cli import main
from pocketmq.cli._app import COMMAND_MODULES
from pocketmq.protocol.limits import MAX_QUERY_RESULTS

DOCS = Path(__file__).resolve().parents[2] / "docs"
# bench lists its sixteen benchmarks in `pocketmq bench --help`; its summary names the kinds
NAMES_EVERY_COMMAND_EXCEPT = {"bench"}


def _commands() -> Iterator[tuple[str, click.Command]]:
    for module in sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(module)

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                yield from walk(sub, f"{path} {name}".strip())

    yield from walk(main, "")


def test_every_option_of_every_command_says_what_it_is_for() -> None:
    silent = [
        f"pocketmq {path} {option.opts[0]}"
        for path, command in _commands()
        for option in command.params
        if isinstance(option, click.Option) and not option.help and option.name != "help"
    ]
    assert not silent, "options without help: " + ", ".join(silent)


def test_a_command_familys_description_names_every_command_it_has() -> None:
    vague = []
    for path, command in _commands():
        if not path or not isinstance(command, click.Group):
            continue
        if path in NAMES_EVERY_COMMAND_EXCEPT:
            continue
        summary = (command.help or "").lower()
        missing = [n for n in command.commands if not re.search(rf"\b{re.escape(n)}\b", summary)]
        if missing:
            vague.append(f"pocketmq {path} (says nothing of {', '.join(missing)})")
    assert not vague, "descriptions that say less than the commands do: " + "; ".join(vague)


@pytest.mark.parametrize("family", ["topic", "group", "broker"])
def test_the_families_the_issue_named_describe_everything_they_do(family: str) -> None:
    shown = CliRunner().invoke(main, [family, "--help"])
    assert shown.exit_code == 0
    description = shown.output.split("Options:")[0].lower()
    command = main.get_command(click.Context(main), family)
    assert isinstance(command, click.Group)
    for name in command.commands:
        assert name in description, f"`pocketmq {family} --help` says nothing of {name}"


def test_message_query_states_the_brokers_limit_as_the_code_and_semantics_md_do() -> None:
    shown = CliRunner().invoke(main, ["message", "query", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    assert f"at most {MAX_QUERY_RESULTS}" in shown.output
    assert "1<=x<=256" in shown.output.replace(" ", "") or "--max" in shown.output
    semantics = (DOCS / "semantics.md").read_text()
    assert f"at most {MAX_QUERY_RESULTS} query matches per broker" in semantics
    cli = (DOCS / "cli.md").read_text()
    assert f"{MAX_QUERY_RESULTS}, the broker's limit" in cli
    assert "(at most 32 per broker)" not in cli


def test_a_server_without_a_port_is_a_usage_error() -> None:
    shown = CliRunner().invoke(main, ["topic", "list", "--server", "127.0.0.1"])
    assert shown.exit_code == 2, shown.output
    assert "'127.0.0.1' is not host:port" in shown.output
    several = CliRunner().invoke(main, ["topic", "list", "--server", "127.0.0.1:9876,h"])
    assert several.exit_code == 2
    assert "'h' is not host:port" in several.output
