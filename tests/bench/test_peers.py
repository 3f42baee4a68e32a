"""``pocketmq bench peers``: every system runs every workload, and the report compares like with
like. Tiny counts: this checks the harness against the real peers, not their speed."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from rich.table import Table

from pocketmq.bench.peers.run import (
    BATCHED,
    COMPARED,
    CONSUME,
    SYSTEMS,
    WORKLOADS,
    Figure,
    report,
    run_peers,
)
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
            # only pocketmq has a listener batch to set; the peers' consume is batched already
            expected = [] if workload == BATCHED and system not in COMPARED else [0, 1]
            assert rounds == expected, (system, workload)
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
    assert cpu.row_count == 4  # the four throughput workloads
    batched = cells(table, f"{BATCHED} (msg/s)")
    for system in SYSTEMS:
        assert (batched[system] == "—") == (system not in COMPARED), (system, batched)
    assert batched["pocketmq-async ÷ best of redis, jetstream"].endswith("*")
    assert batched["pocketmq-sync ÷ best of rabbitmq"].endswith("*")
    assert 'best peer\'s "consume + ack a backlog"' in str(table.caption)


def cells(table: Table, row: str) -> dict[str, str]:
    """One row of a report table, by column header."""
    index = [str(cell) for cell in table.columns[0].cells].index(row)
    return {str(column.header): str(list(column.cells)[index]) for column in table.columns}


def figure(system: str, workload: str, value: float, round_: int = 0) -> Figure:
    return Figure(system, workload, value, round_, client_cpu_us=1.0, server_cpu_us=2.0)


def test_the_listener_batch_row_is_compared_with_the_best_peers_consume() -> None:
    figures = [
        figure("pocketmq-async", CONSUME, 180_000),
        figure("pocketmq-async", BATCHED, 330_000),
        figure("pocketmq-async", BATCHED, 310_000, round_=1),
        figure("redis", CONSUME, 200_000),
        figure("jetstream", CONSUME, 50_000),
    ]
    table, cpu = report(figures, ["pocketmq-async", "redis", "jetstream"])
    ratio = "pocketmq-async ÷ best of redis, jetstream"
    consume = cells(table, f"{CONSUME} (msg/s)")
    assert consume[ratio] == "0.90"  # 180k ÷ Redis's 200k, unmarked
    batched = cells(table, f"{BATCHED} (msg/s)")
    # the median of pocketmq's two rounds (320k) ÷ Redis's consume (200k), marked
    assert batched == {
        "workload": f"{BATCHED} (msg/s)",
        "pocketmq-async": "320,000 (310,000.0–330,000.0)",
        "redis": "—",
        "jetstream": "—",
        ratio: "1.60*",
    }
    assert 'best peer\'s "consume + ack a backlog"' in str(table.caption)
    assert table.row_count == 2  # workloads nobody ran are left out
    assert cells(cpu, BATCHED)["redis client / server µs/msg"] == "—"


def test_without_the_listener_batch_row_there_is_no_footnote() -> None:
    figures = [figure("pocketmq-async", CONSUME, 180_000), figure("redis", CONSUME, 200_000)]
    table, _ = report(figures, ["pocketmq-async", "redis"])
    assert table.row_count == 1
    assert table.caption is None


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
