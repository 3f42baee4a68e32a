"""``pocketmq bench peers``: every system runs every workload, and the report compares like with
like. Tiny counts: this checks the harness against the real peers, not their speed."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from pocketmq.bench.peers.run import SYSTEMS, WORKLOADS, report, run_peers
from pocketmq.bench.peers.workload import RedeliveryProbe, Scale
from pocketmq.cli import main
from pocketmq.testing import require_service

TINY = Scale(
    publish_each=20,
    in_flight=64,
    width=16,
    backlog=200,
    latency_rate=200,
    latency_seconds=0.5,
    redeliveries=10,
    redelivery_rate=50,
    redelivery_delay=0.3,
)


@pytest.fixture
def peers_running() -> None:
    for service in ("rabbitmq", "nats"):
        require_service(service)
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (Debian: redis-server)")


@pytest.mark.timeout(300)
async def test_every_system_runs_every_workload_and_is_compared_with_its_peers(
    peers_running: None,
) -> None:
    figures, missing = await run_peers(list(SYSTEMS), TINY, rounds=2, say=lambda _: None)
    assert missing == {}
    for system in SYSTEMS:
        for workload in WORKLOADS:
            rounds = sorted(
                f.round for f in figures if f.system == system and f.workload == workload
            )
            assert rounds == [0, 1], (system, workload)
    rates = [f for f in figures if WORKLOADS[f.workload][1]]
    assert all(f.value > 0 and f.client_cpu_us > 0 for f in rates)
    redelivered = [
        f for f in figures if f.workload.startswith("redelivery") and "p50" in f.workload
    ]
    # every system honours the requested delay (0.3 s) within a generous margin of lateness
    assert all(-50 < f.value < 2_000 for f in redelivered), redelivered
    table, cpu = report(figures, list(SYSTEMS))
    headers = [column.header for column in table.columns]
    assert "pocketmq-async ÷ best of redis, jetstream" in headers
    assert "pocketmq-sync ÷ best of rabbitmq" in headers
    assert table.row_count == len(WORKLOADS)
    assert cpu.row_count == 3  # the three throughput workloads


async def test_an_unreachable_peer_is_reported_and_left_out() -> None:
    from pocketmq.bench.peers.jetstream import JetStreamPeer

    said: list[str] = []
    SYSTEMS["nowhere"] = lambda: JetStreamPeer("nats://127.0.0.1:1")
    try:
        figures, missing = await run_peers(["nowhere"], TINY, rounds=2, say=said.append)
    finally:
        del SYSTEMS["nowhere"]
    assert figures == []
    assert list(missing) == ["nowhere"]
    assert "not reachable" in missing["nowhere"]
    assert len(said) == 1  # tried once, not again in the second round


def test_a_redelivery_counts_once_and_a_third_delivery_is_not_a_first() -> None:
    from pocketmq.bench.peers.workload import stamped_body

    probe = RedeliveryProbe(expected=1, delay=0.0)
    body = stamped_body(7)
    assert probe.first_delivery(body)
    assert not probe.first_delivery(body)
    assert not probe.first_delivery(body)
    assert len(probe.errors) == 1
    assert probe.done.is_set()


def test_unknown_systems_are_refused_by_name() -> None:
    result = CliRunner().invoke(main, ["bench", "peers", "--systems", "kafka"])
    assert result.exit_code != 0
    assert "unknown system(s): kafka" in result.output
