"""The runnable example in ``examples/exactly_once.py`` (quoted in docs/reliability.md) runs
end to end: through a real broker it starts, with a lost ack and a producer resend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pocketmq.testing.services import require_service

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "exactly_once.py"


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_example_with_sqlite() -> None:
    out = run()
    assert "delivered 3 times, payments recorded: 1, stub CONFIRMED" in out
    assert "handled 1, duplicates 2" in out


@pytest.mark.postgres
def test_example_with_postgres() -> None:
    require_service("postgres")
    out = run("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    assert "delivered 3 times, payments recorded: 1, stub CONFIRMED" in out
