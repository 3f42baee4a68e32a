"""The idempotent-consumption benchmark runs (tiny sizes; figures are in docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.bench.reliability import main, run_benchmark


async def test_benchmark_on_sqlite(tmp_path: Path) -> None:
    result = await run_benchmark(
        url=f"sqlite:///{tmp_path}/bench.db", messages=40, batch_size=8, concurrency=2
    )
    assert result.database == "sqlite"
    assert result.messages == 40
    assert not result.redis
    assert result.messages_per_second > 0
    assert result.duplicates_per_second > 0


def test_benchmark_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--url", f"sqlite:///{tmp_path}/b.db", "--redis", "none", "--messages", "20", "--json"])
    out = capsys.readouterr().out
    assert '"messages": 20' in out
