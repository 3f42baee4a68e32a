"""``pocketmq bench peers``: pocketmq as shipped beside Redis Streams, NATS JetStream and RabbitMQ,
the same workloads in one run, alternating the order each round, with the ratios
(docs/benchmarks.md, "Side by side with the peers").

pocketmq's async flush (the default) is compared with the peers that acknowledge before an fsync
(Redis with AOF everysec, JetStream with file storage); its sync flush with the one that
acknowledges after (RabbitMQ's quorum queue). A peer that is not reachable is reported and left
out; nothing else is skipped.

pocketmq's consume is also measured with ``PushConsumerConfig(batch_size=32)`` (issue 32's
target); the peers have no listener batch to set, so that row's ratio divides by the best
peer's "consume + ack a backlog" of the same run (:data:`PEER_BASIS`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.table import Table

from pocketmq.bench.broker import Meter
from pocketmq.bench.peers.workload import LISTENER_BATCH, Peer, Scale

__all__ = ["PEER_BASIS", "SYSTEMS", "Figure", "main", "report", "run_peers"]


def _pocketmq(flush: str) -> Callable[[], Peer]:
    def make() -> Peer:
        from pocketmq.bench.peers.pocket import PocketPeer

        return PocketPeer(flush)

    return make


def _redis() -> Peer:
    from pocketmq.bench.peers.redis_streams import RedisPeer

    return RedisPeer()


def _jetstream() -> Peer:
    from pocketmq.bench.peers.jetstream import JetStreamPeer

    return JetStreamPeer()


def _rabbitmq() -> Peer:
    from pocketmq.bench.peers.rabbitmq import RabbitPeer

    return RabbitPeer()


#: Every system, by the key ``--systems`` takes, in the order of the first round.
SYSTEMS: dict[str, Callable[[], Peer]] = {
    "pocketmq-async": _pocketmq("async"),
    "redis": _redis,
    "jetstream": _jetstream,
    "pocketmq-sync": _pocketmq("sync"),
    "rabbitmq": _rabbitmq,
}
#: Which peers each pocketmq configuration is compared with (same durability promise).
COMPARED = {"pocketmq-async": ("redis", "jetstream"), "pocketmq-sync": ("rabbitmq",)}

CONSUME = "consume + ack a backlog"
BATCHED = f"{CONSUME}, listener batch {LISTENER_BATCH}"

#: Workload -> (unit, whether a higher figure is better), in the report's order.
WORKLOADS: dict[str, tuple[str, bool]] = {
    "publish, await each ack": ("msg/s", True),
    "publish, 256 in flight": ("msg/s", True),
    CONSUME: ("msg/s", True),
    BATCHED: ("msg/s", True),  # systems with Peer.listener_batches only
    "e2e latency p50": ("ms", False),
    "e2e latency p99": ("ms", False),
    "redelivery after 1 s, error p50": ("ms", False),
    "redelivery after 1 s, error p99": ("ms", False),
}
#: Workload -> the peers' workload its ratio divides by, where the peers have no figure of
#: their own: their idiomatic consume (XREADGROUP 256, fetch 256, prefetch 256) is batched
#: already, so pocketmq's listener batch is set against their one consume figure.
PEER_BASIS = {BATCHED: CONSUME}


@dataclass(frozen=True, slots=True)
class Figure:
    """One system's figure for one workload in one round; CPU in microseconds per message."""

    system: str
    workload: str
    value: float
    round: int
    client_cpu_us: float = 0.0
    server_cpu_us: float = 0.0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else 0.0


async def _throughput(
    system: str, workload: str, round_: int, peer: Peer, count: int, run: Callable[[], object]
) -> Figure:
    with Meter(peer.server_pids) as meter:
        await run()  # type: ignore[misc]
    return Figure(
        system,
        workload,
        count / meter.seconds,
        round_,
        meter.client_cpu / count * 1e6,
        meter.broker_cpu / count * 1e6,
    )


async def measure(system: str, peer: Peer, scale: Scale, round_: int) -> list[Figure]:
    """Every workload on one started system after an untimed warm-up (connections, routes, a
    server's first allocations). The listener-batch consume runs last, on a backlog of its own,
    so the workloads before it run as they always did (their figures stay comparable with the
    records before it was added)."""
    await peer.publish_each(max(10, scale.publish_each // 10))
    figures = [
        await _throughput(
            system, "publish, await each ack", round_, peer, scale.publish_each,
            lambda: peer.publish_each(scale.publish_each),
        ),
        await _throughput(
            system, "publish, 256 in flight", round_, peer, scale.in_flight,
            lambda: peer.publish_in_flight(scale.in_flight, scale.width),
        ),
    ]  # fmt: skip
    await peer.fill(scale.backlog)
    figures.append(
        await _throughput(
            system, CONSUME, round_, peer, scale.backlog, lambda: peer.consume(scale.backlog)
        )
    )
    latencies = await peer.latency(scale.latency_rate, scale.latency_seconds)
    errors = await peer.redelivery(
        scale.redeliveries, scale.redelivery_rate, scale.redelivery_delay
    )
    for workload, values, fraction in (
        ("e2e latency p50", latencies, 0.5),
        ("e2e latency p99", latencies, 0.99),
        ("redelivery after 1 s, error p50", errors, 0.5),
        ("redelivery after 1 s, error p99", errors, 0.99),
    ):
        figures.append(Figure(system, workload, _percentile(values, fraction) * 1000, round_))
    if peer.listener_batches:
        await peer.fill(scale.backlog)
        figures.append(
            await _throughput(
                system, BATCHED, round_, peer, scale.backlog,
                lambda: peer.consume_listener_batch(scale.backlog, LISTENER_BATCH),
            )
        )  # fmt: skip
    return figures


async def run_peers(
    systems: list[str], scale: Scale, rounds: int, say: Callable[[str], None] = print
) -> tuple[list[Figure], dict[str, str]]:
    """Run every system ``rounds`` times, reversing the order every other round (the machine is
    shared: alternating spreads its noise). Returns the figures and the systems that could not
    be reached, with why."""
    figures: list[Figure] = []
    missing: dict[str, str] = {}
    for round_ in range(rounds):
        order = systems if round_ % 2 == 0 else systems[::-1]
        for system in order:
            if system in missing:
                continue
            peer = SYSTEMS[system]()
            try:
                await peer.start()
            except OSError as exc:
                missing[system] = str(exc)
                say(f"{system}: left out ({exc})")
                await peer.close()
                continue
            say(f"round {round_ + 1}/{rounds}: {system} ...")
            try:
                figures += await measure(system, peer, scale, round_)
            finally:
                await peer.close()
    return figures, missing


def _ratio(workload: str, ours: float, theirs: list[float]) -> float:
    """pocketmq ÷ best peer for rates; best peer ÷ pocketmq for times: > 1 means pocketmq wins."""
    higher = WORKLOADS[workload][1]
    if higher:
        return ours / max(theirs) if max(theirs) else 0.0
    floor = 0.01  # 10 µs: no figure here is that small, but an early redelivery can be negative
    return max(min(abs(t) for t in theirs), floor) / max(abs(ours), floor)


def _rate_or_time(unit: str, value: float) -> str:
    return f"{value:,.{0 if unit == 'msg/s' else 2}f}"


def report(figures: list[Figure], systems: list[str]) -> tuple[Table, Table]:
    """The figures (median, min–max over rounds) with the ratios, and the CPU per message.

    A system without figures for a workload (a peer on the listener-batch row) shows "—"; a
    workload in :data:`PEER_BASIS` is compared with the peers' figures for its basis, marked
    with "*" and said in the caption."""
    by: dict[tuple[str, str], list[Figure]] = defaultdict(list)
    for figure in figures:
        by[(figure.system, figure.workload)].append(figure)
    median = {key: statistics.median(f.value for f in found) for key, found in by.items()}
    present = [s for s in systems if any(f.system == s for f in figures)]
    comparisons = [(ours, [p for p in peers if p in present])
                   for ours, peers in COMPARED.items() if ours in present]  # fmt: skip
    comparisons = [(ours, peers) for ours, peers in comparisons if peers]
    table = Table("workload", *present, *(f"{ours} ÷ best of {', '.join(peers)}"
                                          for ours, peers in comparisons))  # fmt: skip
    cpu = Table("workload", *(f"{s} client / server µs/msg" for s in present))
    note = ""
    for workload, (unit, _) in WORKLOADS.items():
        if not any(f.workload == workload for f in figures):
            continue  # a run of peers only has no listener-batch row
        cells = []
        for system in present:
            values = [f.value for f in by[(system, workload)]]
            spread = f" ({min(values):,.1f}–{max(values):,.1f})" if len(values) > 1 else ""
            cells.append(f"{_rate_or_time(unit, median[(system, workload)])}{spread}"
                         if values else "—")  # fmt: skip
        basis = PEER_BASIS.get(workload, workload)
        mark = "*" if basis != workload else ""
        ratios = []
        for ours, peers in comparisons:
            theirs = [median[(p, basis)] for p in peers if (p, basis) in median]
            if (ours, workload) in median and theirs:
                ratios.append(f"{_ratio(workload, median[(ours, workload)], theirs):.2f}{mark}")
                if mark:
                    note = (f"* {workload}: the peers have no listener batch to set (their "
                            f"consume is batched already), hence —; the ratio divides by the "
                            f"best peer's \"{basis}\" of this run")  # fmt: skip
            else:
                ratios.append("—")
        table.add_row(f"{workload} ({unit})", *cells, *ratios)
        if unit == "msg/s":
            cpu.add_row(
                workload,
                *(
                    f"{statistics.median(f.client_cpu_us for f in by[(s, workload)]):.0f} / "
                    f"{statistics.median(f.server_cpu_us for f in by[(s, workload)]):.0f}"
                    if by[(s, workload)]
                    else "—"
                    for s in present
                ),
            )
    if note:
        table.caption = note
    return table, cpu


def main(argv: list[str] | None = None) -> None:
    """The command line: run, print both tables, append the figures to ``--record``."""
    parser = argparse.ArgumentParser(
        prog="pocketmq bench peers",
        description="pocketmq (defaults) beside Redis Streams, NATS JetStream and RabbitMQ.",
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, from: {', '.join(SYSTEMS)}",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the order")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the message counts")
    parser.add_argument("--record", help="append the figures as JSON lines to this file")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s): {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    figures, _ = asyncio.run(run_peers(systems, Scale().scaled(args.scale), max(1, args.rounds)))
    console = Console(width=200)
    for table in report(figures, systems):
        console.print(table)
    if args.record:
        stamp = time.strftime("%Y-%m-%d %H:%M")
        with open(args.record, "a") as handle:
            for figure in figures:
                row = {"bench": "peers", "at": stamp, "host": platform.node(), **asdict(figure)}
                handle.write(json.dumps(row) + "\n")
