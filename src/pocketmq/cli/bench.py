"""``pocketmq bench ...``: every benchmark of pocketmq behind one command (docs/benchmarks.md).

Why one command: the figures in docs/benchmarks.md must be reproducible by anyone with one
``make bench``, so every benchmark — whatever part of pocketmq it measures — lives in
:mod:`pocketmq.bench` and is started the same way:

* ``store``, ``produce``, ``consume``, ``latency``, ``delay``, ``fifo`` print a table (rate, wall
  time, CPU of the client and of the broker process) and can append the figures as JSON lines
  to a file (``--record``);
* ``idempotent`` (:mod:`pocketmq.bench.reliability`), ``grpc`` (:mod:`pocketmq.bench.grpc`) and
  ``reconcile`` (:mod:`pocketmq.bench.pipeline`) keep their own options, which are passed
  through unchanged (``pocketmq bench grpc --help`` lists them).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import platform
import time
from collections.abc import Callable

import click
from rich.console import Console
from rich.table import Table

from pocketmq.bench.broker import BENCHES as BROKER_BENCHES
from pocketmq.bench.broker import BenchResult
from pocketmq.bench.dashboard import run_dashboard
from pocketmq.bench.grpc_tls import run_grpc_tls
from pocketmq.bench.history import run_history
from pocketmq.bench.replication import run_replication
from pocketmq.bench.scrape import run_scrape
from pocketmq.bench.security import run_security
from pocketmq.cli._app import main

__all__: list[str] = []

BENCHES = {
    **BROKER_BENCHES,
    "replication": run_replication,
    "scrape": run_scrape,
    "dashboard": run_dashboard,
    "security": run_security,
    "grpc-tls": run_grpc_tls,
    "history": run_history,
}


def _record(path: str | None, name: str, rows: list[dict[str, object]]) -> None:
    if not path:
        return
    stamp = time.strftime("%Y-%m-%d %H:%M")
    with open(path, "a") as handle:
        for row in rows:
            handle.write(
                json.dumps({"bench": name, "at": stamp, "host": platform.node(), **row}) + "\n"
            )


@main.group()
def bench() -> None:
    """Benchmarks (docs/benchmarks.md); broker ones start a broker unless --server is given."""


@bench.command("store")
@click.option("--dir", "directory", default=".", show_default=True, help="Where to put the store.")
@click.option("--scale", default=1.0, show_default=True, help="Multiply the record counts.")
@click.option("--record", "record_path", help="Append the figures as JSON lines to this file.")
def bench_store(directory: str, scale: float, record_path: str | None) -> None:
    """Store throughput: async flush (1, 16, 64 per append) and sync flush (1, 16, 64 writers)."""
    from pocketmq.bench.store import run_store_bench

    results = run_store_bench(directory, scale=scale)
    table = Table("case", "records/s", "MB/s", "records", "seconds", "CPU s")
    rows = []
    for r in results:
        table.add_row(
            r.case,
            f"{r.records_per_second:,.0f}",
            f"{r.megabytes_per_second:,.1f}",
            f"{r.records:,}",
            f"{r.seconds:.2f}",
            f"{r.cpu_seconds:.2f}",
        )
        rows.append(
            {
                "case": r.case,
                "rate": r.records_per_second,
                "mb_s": r.megabytes_per_second,
                "seconds": r.seconds,
                "cpu": r.cpu_seconds,
            }
        )
    Console(width=160).print(table)
    _record(record_path, "store", rows)


def _print(name: str, results: list[BenchResult], record_path: str | None) -> None:
    table = Table("case", "msg/s", "messages", "seconds", "client CPU s", "broker CPU s", "notes")
    rows = []
    for r in results:
        notes = " ".join(f"{k}={v:.2f}" for k, v in r.extra.items())
        table.add_row(
            r.case,
            f"{r.rate:,.0f}",
            f"{r.messages:,}",
            f"{r.seconds:.2f}",
            f"{r.client_cpu:.2f}",
            f"{r.broker_cpu:.2f}",
            notes,
        )
        rows.append(
            {
                "case": r.case,
                "rate": r.rate,
                "seconds": r.seconds,
                "client_cpu": r.client_cpu,
                "broker_cpu": r.broker_cpu,
                **r.extra,
            }
        )
    Console(width=160).print(table)
    _record(record_path, name, rows)


def _broker_bench(name: str) -> None:
    @bench.command(name, help=f"End-to-end '{name}' benchmark.")
    @click.option("--server", help="Benchmark an already running broker (default: start one).")
    @click.option("--record", "record_path", help="Append the figures as JSON lines to this file.")
    def command(server: str | None, record_path: str | None) -> None:
        _print(name, asyncio.run(BENCHES[name](server)), record_path)


for _name in BENCHES:
    _broker_bench(_name)


#: Benchmarks with options of their own: command -> (module, what it measures).
PASS_THROUGH: dict[str, tuple[str, str]] = {
    "idempotent": (
        "pocketmq.bench.reliability",
        "Idempotent-consumption throughput of the reliability toolkit (SQL database, Redis).",
    ),
    "grpc": (
        "pocketmq.bench.grpc",
        "The official RocketMQ 5 Python client against pocketmq, beside the native SDK.",
    ),
    "proxy": (
        "pocketmq.bench.proxy",
        "Official producers through gRPC served in the broker process vs by proxy workers.",
    ),
    "peers": (
        "pocketmq.bench.peers.run",
        "pocketmq as shipped beside Redis Streams, NATS JetStream and RabbitMQ, ratios in one run.",
    ),
    "reconcile": (
        "pocketmq.bench.pipeline",
        "The Spark reconcile job on 10M stubs against the same query in DuckDB.",
    ),
}


def _pass_through(name: str, module: str, summary: str) -> None:
    @bench.command(
        name,
        help=f"{summary} Options: pocketmq bench {name} --help.",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        entry: Callable[[list[str]], int | None] = importlib.import_module(module).main
        code = entry(list(args))
        if code:
            raise SystemExit(code)


for _name, (_module, _summary) in PASS_THROUGH.items():
    _pass_through(_name, _module, _summary)
