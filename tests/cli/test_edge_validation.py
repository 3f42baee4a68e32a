"""The CLI refuses values that used to surface as raw Python errors deep in a send (a delay
that is no duration, an empty property name, an unworkable retry multiplier) with a usage error
or a clean message. Nothing here reaches a broker: the address is a closed port."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pocketmq.cli import main

NOWHERE = "127.0.0.1:9"  # discard port: nothing listens


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--server", NOWHERE])
    assert isinstance(result.exception, SystemExit), result.exception  # a clean exit, no crash
    return result.exit_code, result.output


@pytest.mark.parametrize("delay", ["nan", "1e400", "inf", "-5s", "soon"])
def test_cli_send_refuses_a_delay_that_is_no_duration(delay: str) -> None:
    code, output = _cli("send", "t", "body", "--delay", delay)
    assert code == 2
    assert "is not a duration" in output


def test_cli_send_refuses_an_empty_property_name() -> None:
    code, output = _cli("send", "t", "body", "--property", "=value")
    assert code == 1
    assert "property name must not be empty" in output


@pytest.mark.parametrize("multiplier", ["nan", "1e308", "x", "0.5"])
def test_cli_group_create_refuses_a_bad_multiplier(multiplier: str) -> None:
    code, output = _cli("group", "create", "g", "--retry-exponential", f"1s,{multiplier},1m")
    assert code == 2
    assert "multiplier" in output
