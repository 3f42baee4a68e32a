"""``pocketmq bench``: every benchmark behind one command, options passed through unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pocketmq.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_every_benchmark_is_a_bench_command() -> None:
    code, out = run("bench", "--help")
    assert code == 0
    for name in ("store", "produce", "consume", "latency", "delay", "fifo"):
        assert name in out
    for name in ("idempotent", "grpc", "reconcile"):
        assert name in out


@pytest.mark.parametrize(
    ("command", "option"),
    [("idempotent", "--concurrency"), ("grpc", "--in-flight"), ("reconcile", "--skip-duckdb")],
)
def test_pass_through_commands_show_their_own_options(command: str, option: str) -> None:
    """``--help`` reaches the benchmark's own parser (which exits 0 after printing it)."""
    code, out = run("bench", command, "--help")
    assert code == 0
    assert f"pocketmq bench {command}" in out
    assert option in out


def test_idempotent_runs_through_the_cli(tmp_path: Path) -> None:
    code, out = run(
        "bench",
        "idempotent",
        "--url",
        f"sqlite:///{tmp_path}/b.db",
        "--redis",
        "none",
        "--messages",
        "16",
        "--json",
    )
    assert code == 0, out
    assert '"messages": 16' in out


def test_a_bad_option_is_the_benchmarks_usage_error() -> None:
    code, out = run("bench", "idempotent", "--no-such-option")
    assert code == 2
    assert "unrecognized arguments" in out
