"""Broker and client CPU per consumed message over a real drain of a backlog (issue 32).

A broker process (``pocketmq serve``, its defaults) is filled with ``--backlog`` 1 KiB messages
through the default ``Producer``; then the default ``PushConsumer`` (one message per listener
call, outcomes reported, docs/semantics.md) drains it while the broker's user and system CPU
(``/proc/<pid>/stat``) and the client's (``getrusage``) are read around the drain. Optionally
``strace -c -f`` or ``py-spy record`` is attached to the broker for the drain only (``--strace``,
``--pyspy``). One JSON line per run; ``--rounds`` alternates the trees given as ``name=src``,
each run a fresh process pair with that tree on ``PYTHONPATH`` (docs/benchmarks.md, "Broker CPU
per consumed message, wall clock"):

    python scripts/consume_drain.py --rounds 3 before=/work/main/src after=src
    PYTHONPATH=src python scripts/consume_drain.py --one --strace /tmp/drain.strace

``--batch-size`` sets the consumer's listener batch (``PushConsumerConfig.batch_size``).
``gc_collections``: the broker's garbage collections by generation over the drain and the
second after it (its ``python_gc_collections_total``).
``--trace`` adds what paces the drain (``scripts/drain_trace.py``: pull round trips, pulls in
flight, the consumer's flow-control waits, each process's busy share, whether they shared a
core, what other processes used); ``--pin split|same`` runs the drain with the broker and the
client on separate cores or on one (docs/benchmarks.md, "Consume rate against Redis").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def _own_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _requests(http: str) -> dict[str, int]:
    """Requests the broker answered so far, by request code (``rocketmq_rpc_latency_count``),
    and its garbage collections so far, as ``gc<generation>`` (``python_gc_collections_total``:
    a drain runs none, docs/benchmarks.md "ISA-L's CRC-32 on the pull")."""
    import re
    import urllib.request

    text = urllib.request.urlopen(f"http://{http}/metrics", timeout=10).read().decode()
    counts: dict[str, int] = {}
    for match in re.finditer(
        r'^rocketmq_rpc_latency_count\{[^}]*request_code="([^"]+)"[^}]*\} (\S+)$', text, re.M
    ):
        counts[match[1]] = counts.get(match[1], 0) + int(float(match[2]))
    for match in re.finditer(
        r'^python_gc_collections_total\{generation="(\d)"\} (\S+)$', text, re.M
    ):
        counts[f"gc{match[1]}"] = int(float(match[2]))
    return counts


def _attach(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes] | None:
    if args.strace:
        command = ["strace", "-c", "-f", "-o", args.strace, "-p", str(pid)]
    elif args.pyspy:
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        command = [spy, "record", "--pid", str(pid), "--rate", str(args.rate)]
        command += ["--format", "raw", "--output", args.pyspy, "--threads"]
        command += ["--native"] if args.native else ["--nonblocking"]
    else:
        return None
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def _drain(args: argparse.Namespace) -> dict[str, Any]:
    from side_by_side import (  # scripts/, on the path as this script's
        counting_listener,
        start_broker,
    )

    from pocketmq import compiled
    from pocketmq.bench.broker import in_flight
    from pocketmq.client import Admin, Message, Producer, PushConsumer, PushConsumerConfig

    directory, broker = await asyncio.to_thread(start_broker, "consume-drain-", *args.serve.split())
    pid, address, backlog = broker.process.pid, broker.address, args.backlog
    try:
        async with Admin(servers=address) as admin:
            await admin.create_topic("drain")
            await admin.create_group("drain")
        async with Producer(servers=address) as producer:
            message = Message(topic="drain", body=b"x" * 1024)
            await in_flight(backlog, 1024, lambda: producer.send(message))
        await asyncio.sleep(1.0)  # the broker's flush and dispatch settle
        if args.pin:  # "split": the broker on core 0, this client on core 1; "same": both on 0
            cores = {"split": ("0", "1"), "same": ("0", "0")}[args.pin]
            for task, core in ((pid, cores[0]), (os.getpid(), cores[1])):
                command = ["taskset", "-a", "-cp", core, str(task)]
                await asyncio.to_thread(subprocess.run, command, check=True, capture_output=True)
        tracer = _attach(pid, args)
        if tracer is not None:
            await asyncio.sleep(1.5)  # the tracer attaches
        done, listener = counting_listener(backlog)
        trace = None
        if args.trace:
            from drain_trace import DrainTrace  # scripts/, on the path as this script's

            trace = DrainTrace(pid)
        requests = _requests(broker.http) if broker.http else {}
        began, client, server = time.perf_counter(), _own_cpu(), _proc_cpu(pid)
        config = PushConsumerConfig(batch_size=args.batch_size)
        async with PushConsumer(
            "drain", "drain", listener, servers=address, config=config
        ) as consumer:
            if trace is not None:
                trace.start(consumer)
            await asyncio.wait_for(done.wait(), 900)
        seconds, client_end, server_end = time.perf_counter() - began, _own_cpu(), _proc_cpu(pid)
        await asyncio.sleep(1.0)  # what the broker still does for the drain (history intake)
        settled = _proc_cpu(pid)
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(120)
        per = 1e6 / backlog
        after = _requests(broker.http) if broker.http else {}
        answered = {code: n - requests.get(code, 0) for code, n in after.items()}
        collections = {
            code: answered.pop(code) for code in ("gc0", "gc1", "gc2") if code in answered
        }
        return {
            "rate": round(backlog / seconds),
            "broker_us": round((sum(server_end) - sum(server)) * per, 1),
            "broker_user_us": round((server_end[0] - server[0]) * per, 1),
            "broker_sys_us": round((server_end[1] - server[1]) * per, 1),
            "broker_settled_us": round((sum(settled) - sum(server)) * per, 1),
            "client_us": round((sum(client_end) - sum(client)) * per, 1),
            "client_user_us": round((client_end[0] - client[0]) * per, 1),
            "client_sys_us": round((client_end[1] - client[1]) * per, 1),
            "requests": {code: n for code, n in sorted(answered.items()) if n},
            "gc_collections": collections,  # by generation, the drain and the second after it
            "compiled": len(compiled.COMPILED),
            "load": round(os.getloadavg()[0], 1),
            **(trace.stop() if trace is not None else {}),
        }
    finally:
        await asyncio.to_thread(broker.stop)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    """One run here (``--one``), or ``--rounds`` of the trees given, alternating."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", help="name=path to a tree's src")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1, help="the listener's batch size")
    parser.add_argument("--one", action="store_true", help="one run, in this process")
    parser.add_argument("--strace", help="strace -c -f the broker during the drain, to this file")
    parser.add_argument("--pyspy", help="py-spy record the broker during the drain, raw, here")
    parser.add_argument("--native", action="store_true", help="py-spy --native")
    parser.add_argument("--serve", default="", help="more pocketmq serve arguments, one string")
    parser.add_argument("--pin", choices=("split", "same"), help="CPU affinity for the drain")
    parser.add_argument("--trace", action="store_true", help="stamp pulls, sample the consumer")
    parser.add_argument("--rate", type=int, default=400, help="py-spy samples per second")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(_drain(args))), flush=True)
        return
    for round_ in range(args.rounds):
        for n in range(len(args.trees)):
            name, path = args.trees[(n + round_) % len(args.trees)].split("=", 1)
            env = {**os.environ, "PYTHONPATH": path}
            command = [sys.executable, __file__, "--one", "--backlog", str(args.backlog)]
            command += ["--batch-size", str(args.batch_size)]
            command += ["--trace"] if args.trace else []
            command += ["--pin", args.pin] if args.pin else []
            command += [f"--serve={args.serve}"] if args.serve else []
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            result = (
                json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-300:]}
            )
            print(json.dumps({"round": round_ + 1, "tree": name, **result}), flush=True)


if __name__ == "__main__":
    main()
