"""The gRPC benchmark runs end to end (tiny counts: a smoke test, not a measurement)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pocketmq.bench.grpc import print_results, run_grpc_bench


def test_grpc_bench_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = run_grpc_bench(
        messages=60, sync_messages=20, in_flight=8, ack_threads=2, directory=str(tmp_path)
    )
    assert [r.case.split()[0] for r in results] == ["official"] * 4 + ["native"] * 4
    assert all(r.messages > 0 and r.per_second > 0 for r in results)
    assert all(r.client_cpu > 0 for r in results)
    # the broker served every case, so its CPU adds up to something; a case's CPU is seconds
    # (not /proc's clock ticks) when it fits in the case's wall time on this machine's cores,
    # plus the tick sampling's rounding: each core may charge the broker one tick more than it
    # ran (a bound of one tick in all failed once in CI, where native cases last 4-20 ms)
    assert sum(r.broker_cpu for r in results) > 0
    cores = os.cpu_count() or 1
    tick = 1 / os.sysconf("SC_CLK_TCK")
    for r in results:  # one at a time: a failure names its case
        assert 0 <= r.broker_cpu <= (r.seconds + tick) * cores, r
    print_results(results)
    assert "official send()" in capsys.readouterr().out
