"""The ``pocketmq`` entry point exists and answers --help."""

from click.testing import CliRunner

from pocketmq.cli import main


def test_help_lists_the_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "pocketmq" in result.output
