"""Benchmark: the reconcile job on Spark against the same query in DuckDB, in one run.

Why DuckDB beside Spark: a single-machine engine running the same query on the same Parquet is
the yardstick that says whether Spark's plan is good, independent of how fast the machine is
that day (docs/benchmarks.md "Pipelines").

``pocketmq bench reconcile`` (or ``python -m pocketmq.bench.pipeline``) generates (once, cached
under ``bench-results/``) a stub table of 10M rows and a log of ~9M rows as Parquet, then runs
the reconcile — read both inputs, compute the resend and manual-handling lists, write both as
Parquet — on Spark ``local[2]`` and in DuckDB with 2 threads, and checks both engines produce
the same lists.

What each figure includes:

* ``session start``: creating the SparkSession (JVM start, up to a usable session).
* ``first run``: the first reconcile in the fresh JVM (cold JIT, cold page cache for Spark's
  reads unless DuckDB ran first).
* ``warm median``: the median of the following runs in the same JVM (DuckDB: in the same
  process, a new in-memory connection per run, which costs milliseconds).
* rows/s: (stub rows + log rows) / warm median.

The runs alternate between the engines (DuckDB, Spark, DuckDB, ...) so both see the same
background load; the 1-minute load average before and after is recorded, because on a shared
2-core machine it moves the figures more than most tuning does. The ratio compares warm medians;
the end-to-end figure (session start + first run) is reported too, since that is what a
cron-driven ``pocketmq pipeline reconcile`` pays. Results go to ``bench-results/reconcile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pocketmq.pipeline.demo import DEMO_NOW, generate_demo_data

__all__ = ["DuckDBResult", "SparkResult", "duckdb_reconcile", "main"]

_RESEND_STATUSES = "('UNCONFIRMED', 'UNKNOWN')"
#: The send limit both engines reconcile with (the demo data's default).
_MAX_SENDS: Final = 5


@dataclass(frozen=True, kw_only=True, slots=True)
class SparkResult:
    """Spark's figures: session start, the cold first run, the warm runs after it."""

    session_start_s: float
    first_run_s: float
    warm_runs_s: list[float]
    resend: int
    manual: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DuckDBResult:
    """DuckDB's figures for the same query: the first run and the warm runs."""

    first_run_s: float
    warm_runs_s: list[float]
    resend: int
    manual: int


def duckdb_reconcile(
    stubs: Path, log: Path, out: Path, now: datetime, max_sends: int, threads: int
) -> tuple[float, int, int]:
    """The reconcile rule as one DuckDB query; returns (seconds, resend rows, manual rows)."""
    import duckdb

    started = time.perf_counter()
    con = duckdb.connect()
    try:
        con.execute(f"SET threads = {int(threads)}")
        con.execute("SET preserve_insertion_order = false")
        stubs_glob = str(stubs / "*.parquet")
        log_glob = str(log / "*.parquet")
        con.execute(
            f"""
            CREATE TEMP TABLE unsettled AS
            WITH log AS (
                SELECT message_id, topic, broker_name, queue_id, queue_offset
                FROM read_parquet('{log_glob}')
            ),
            max_offsets AS (
                SELECT topic, broker_name, queue_id, max(queue_offset) AS max_logged_offset
                FROM log GROUP BY topic, broker_name, queue_id
            )
            SELECT s.*, m.max_logged_offset
            FROM read_parquet('{stubs_glob}') s
            LEFT JOIN max_offsets m
              ON s.topic = m.topic AND s.broker_name = m.broker_name AND s.queue_id = m.queue_id
            WHERE s.status IN {_RESEND_STATUSES}
              AND s.next_resend_at <= TIMESTAMP '{now.isoformat(sep=" ")}'
              AND (s.queue_offset IS NULL OR s.queue_offset < m.max_logged_offset)
              AND NOT EXISTS (SELECT 1 FROM log l WHERE l.message_id = s.message_id)
            """
        )
        for name, cond in (("resend", "<"), ("manual", ">=")):
            target = out / name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            con.execute(
                f"COPY (SELECT * FROM unsettled WHERE send_count {cond} {int(max_sends)}) "
                f"TO '{target / 'part-0.parquet'}' (FORMAT parquet)"
            )
        counts = con.execute(
            f"SELECT count(*) FILTER (WHERE send_count < {int(max_sends)}), "
            f"count(*) FILTER (WHERE send_count >= {int(max_sends)}) FROM unsettled"
        ).fetchone()
    finally:
        con.close()
    assert counts is not None
    return time.perf_counter() - started, int(counts[0]), int(counts[1])


def _ids(path: Path) -> set[str]:
    import pyarrow.parquet as pq

    return set(pq.read_table(path, columns=["message_id"]).column("message_id").to_pylist())


def main(argv: list[str] | None = None) -> int:
    """The command line; exit status 1 when the two engines' lists differ."""
    args = _parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    data_dir = args.dir / f"reconcile-data-{args.stubs}-{args.log_ratio}-{args.seed}"
    meta = _cached_demo_data(data_dir, args)
    conf = dict(item.split("=", 1) for item in args.conf)
    load_before, spark, duck = _run_alternating(args, data_dir, conf)
    same = None
    if duck is not None:
        same = all(
            _ids(args.dir / "out-spark" / name) == _ids(args.dir / "out-duckdb" / name)
            for name in ("resend", "manual")
        )
    report = _report(args, meta, conf, spark, duck, same, load_before)
    args.dir.mkdir(parents=True, exist_ok=True)
    (args.dir / "reconcile.json").write_text(json.dumps(report, indent=2) + "\n")
    _print_report(report)
    return 0 if same in (None, True) else 1


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pocketmq bench reconcile", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stubs", type=int, default=10_000_000)
    parser.add_argument("--log-ratio", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=8, help="runs per engine (first + warm)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--threads", type=int, default=2, help="DuckDB threads")
    parser.add_argument("--driver-memory", default=None, help="default: the session builder's")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf"
    )
    parser.add_argument("--dir", type=Path, default=Path("bench-results"))
    parser.add_argument("--skip-duckdb", action="store_true")
    return parser.parse_args(argv)


def _cached_demo_data(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The demo data's manifest, generating the data first unless an earlier run left it."""
    marker = data_dir / "demo.json"
    if not marker.exists():
        print(f"generating {args.stubs:,} stubs into {data_dir} ...", file=sys.stderr)
        t = time.perf_counter()
        generate_demo_data(
            data_dir, stubs=args.stubs, log_ratio=args.log_ratio, seed=args.seed, exports=False
        )
        print(f"  generated in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    meta: dict[str, Any] = json.loads(marker.read_text())
    return meta


def _run_alternating(
    args: argparse.Namespace, data_dir: Path, conf: dict[str, str]
) -> tuple[tuple[float, float, float], SparkResult, DuckDBResult | None]:
    """Spark session start, then the runs interleaved (DuckDB, Spark, DuckDB, Spark, ...) so
    both engines see the same background load on a shared machine. Returns the load average
    before the session started and both engines' figures."""
    from pyspark.sql import SparkSession

    from pocketmq.pipeline.reconcile import run_reconcile
    from pocketmq.pipeline.session import spark_session

    stubs, log = data_dir / "stubs", data_dir / "log"
    load_before = os.getloadavg()
    started = time.perf_counter()
    borrowed = SparkSession.getActiveSession() is not None  # a notebook's: not ours to stop
    session = spark_session(
        args.master, "pocketmq-bench", quiet=True, driver_memory=args.driver_memory, conf=conf
    )
    session.range(1).count()
    session_s = time.perf_counter() - started
    s_times: list[float] = []
    d_times: list[float] = []
    s_counts = d_counts = (0, 0)
    try:
        for _ in range(args.runs):
            if not args.skip_duckdb:
                secs, r, m = duckdb_reconcile(
                    stubs, log, args.dir / "out-duckdb", DEMO_NOW, _MAX_SENDS, args.threads
                )
                d_times.append(secs)
                d_counts = (r, m)
                print(f"  duckdb run: {secs:.2f} s", file=sys.stderr)
            t = time.perf_counter()
            summary = run_reconcile(
                session,
                stubs=str(stubs),
                log=str(log),
                out=str(args.dir / "out-spark"),
                now=DEMO_NOW,
                max_sends=_MAX_SENDS,
            )
            s_times.append(time.perf_counter() - t)
            s_counts = (summary.resend, summary.manual)
            print(f"  spark run: {s_times[-1]:.2f} s", file=sys.stderr)
    finally:
        if not borrowed:
            session.stop()
    spark = SparkResult(
        session_start_s=session_s,
        first_run_s=s_times[0],
        warm_runs_s=s_times[1:],
        resend=s_counts[0],
        manual=s_counts[1],
    )
    duck = (
        DuckDBResult(
            first_run_s=d_times[0], warm_runs_s=d_times[1:], resend=d_counts[0], manual=d_counts[1]
        )
        if d_times
        else None
    )
    return load_before, spark, duck


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _report(
    args: argparse.Namespace,
    meta: dict[str, Any],
    conf: dict[str, str],
    spark: SparkResult,
    duck: DuckDBResult | None,
    same: bool | None,
    load_before: tuple[float, float, float],
) -> dict[str, Any]:
    """The contents of ``reconcile.json``."""
    report: dict[str, Any] = {
        "date": datetime.now().strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}",
        "rows": {"stubs": meta["stubs"], "log": meta["log"]},
        "spark": asdict(spark)
        | {"warm_median_s": _median(spark.warm_runs_s), "master": args.master, "conf": conf},
        "duckdb": (
            asdict(duck) | {"warm_median_s": _median(duck.warm_runs_s), "threads": args.threads}
        )
        if duck
        else None,
        "same_results": same,
        "load_average_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    if duck is not None:
        report["ratio_warm"] = _median(spark.warm_runs_s) / _median(duck.warm_runs_s)
        report["ratio_end_to_end"] = (spark.session_start_s + spark.first_run_s) / duck.first_run_s
    return report


def _print_report(report: dict[str, Any]) -> None:
    """The figures of ``reconcile.json`` as a few lines for the terminal."""
    rows, spark, duck = report["rows"], report["spark"], report["duckdb"]
    n_rows = int(rows["stubs"]) + int(rows["log"])
    print(f"reconcile benchmark: {rows['stubs']:,} stubs + {rows['log']:,} log rows (Parquet)")
    print(
        f"  spark {spark['master']}: session start {spark['session_start_s']:.1f} s, "
        f"first run {spark['first_run_s']:.1f} s, warm median {spark['warm_median_s']:.2f} s "
        f"({n_rows / spark['warm_median_s']:,.0f} rows/s)"
    )
    if duck is not None:
        print(
            f"  duckdb {duck['threads']} threads: first run {duck['first_run_s']:.2f} s, warm "
            f"median {duck['warm_median_s']:.2f} s ({n_rows / duck['warm_median_s']:,.0f} rows/s)"
        )
        print(
            f"  ratio spark/duckdb (warm medians): {report['ratio_warm']:.2f}x; end to end "
            f"(session start + first run vs first run): {report['ratio_end_to_end']:.2f}x"
        )
        print(
            f"  same resend/manual lists: {report['same_results']} "
            f"(resend {spark['resend']:,}, manual {spark['manual']:,})"
        )
    print(f"  load average (1 min) before/after: {report['load_average_1m_before_after']}")


if __name__ == "__main__":
    raise SystemExit(main())
