"""Two trees (or one, compiled and pure) side by side on the client workloads of issue 32.

Each run is a fresh process pair: a broker (``pocketmq serve``, the defaults) and this client,
both on the tree given as ``PYTHONPATH`` and with the environment given (so
``POCKETMQ_NO_EXTENSIONS=1`` makes both pure). It measures, with 1 KiB messages: awaiting each
send (``--each``), 256 sends in flight, and push consumption of a ``--backlog`` with the default
consumer (one message per listener call) and with ``batch_size=32``; for each, msg/s and the CPU
µs per message of the client and of the broker (``getrusage`` and ``/proc``). ``--rounds``
alternates the configurations, rotating their order each round, and prints one JSON line a run
(docs/benchmarks.md, "Compiled consumer path"):

    python scripts/side_by_side.py --rounds 3 main=/work/main/src speed=src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def start_broker(prefix: str, *extra: str) -> tuple[str, Any]:
    """A broker process with the defaults (and its HTTP port, for metrics) in a new temporary
    directory: ``(directory, BrokerProcess)``; the caller stops it and removes the directory.
    ``extra``: more ``pocketmq serve`` arguments (``--loop asyncio``)."""
    from pocketmq.testing import BrokerProcess

    directory = tempfile.mkdtemp(prefix=prefix)
    broker = BrokerProcess(
        Path(directory), http_port=0, extra_args=("--log-level", "warning", *extra)
    )
    assert broker.process is not None
    return directory, broker


def counting_listener(count: int) -> tuple[asyncio.Event, Any]:
    """A push consumer's listener that succeeds and sets the event once ``count`` messages
    came: ``(event, listener)``."""
    from pocketmq.client import ConsumeStatus, MessageView

    done, seen = asyncio.Event(), [0]

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        seen[0] += len(messages)
        if seen[0] >= count:
            done.set()
        return ConsumeStatus.SUCCESS

    return done, listener


async def _workloads(backlog: int, each: int) -> dict[str, Any]:
    from pocketmq import compiled
    from pocketmq.bench.broker import in_flight, own_cpu, process_cpu
    from pocketmq.client import (
        Admin,
        Message,
        Producer,
        PushConsumer,
        PushConsumerConfig,
    )

    directory, broker = await asyncio.to_thread(start_broker, "side-by-side-")
    pid, address, out = broker.process.pid, broker.address, {}
    body = b"x" * 1024

    async def measure(name: str, count: int, work: Any) -> None:
        began, client, server = time.perf_counter(), own_cpu(), process_cpu(pid)
        await work()
        out[name] = {
            "rate": round(count / (time.perf_counter() - began)),
            "client_us": round((own_cpu() - client) / count * 1e6, 1),
            "broker_us": round((process_cpu(pid) - server) / count * 1e6, 1),
        }

    async def consume(topic: str, batch: int) -> None:
        done, listener = counting_listener(backlog)
        config = PushConsumerConfig(batch_size=batch)
        async with PushConsumer(topic, topic, listener, servers=address, config=config):
            await asyncio.wait_for(done.wait(), 600)

    try:
        async with Admin(servers=address) as admin:
            for topic in ("each", "pipe", "b1", "b32"):
                await admin.create_topic(topic)
            for group in ("b1", "b32"):
                await admin.create_group(group)
        async with Producer(servers=address) as producer:
            for topic in ("b1", "b32"):
                message = Message(topic=topic, body=body)
                await in_flight(backlog, 1024, lambda m=message: producer.send(m))
            lone = Message(topic="each", body=body)
            for _ in range(200):  # warm
                await producer.send(lone)

            async def await_each() -> None:
                for _ in range(each):
                    await producer.send(lone)

            await measure("await_each", each, await_each)
            piped = Message(topic="pipe", body=body)
            await measure(
                "pipelined", backlog, lambda: in_flight(backlog, 256, lambda: producer.send(piped))
            )
        await measure("consume_b1", backlog, lambda: consume("b1", 1))
        await measure("consume_b32", backlog, lambda: consume("b32", 32))
        out["compiled"] = len(compiled.COMPILED)
        out["load"] = round(os.getloadavg()[0], 1)
    finally:
        await asyncio.to_thread(broker.stop)
        shutil.rmtree(directory, ignore_errors=True)
    return out


def main() -> None:
    """Run the configurations ``name=tree`` (each compiled and pure) for ``--rounds``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", help="name=path to a tree's src")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--each", type=int, default=4_000)
    parser.add_argument("--one", action="store_true", help="(internal) one run, here")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(_workloads(args.backlog, args.each))), flush=True)
        return
    configs = [(tree, pure) for tree in args.trees for pure in ("0", "1")]
    for round_ in range(args.rounds):
        for n in range(len(configs)):
            tree, pure = configs[(n + round_) % len(configs)]
            name, path = tree.split("=", 1)
            env = {**os.environ, "PYTHONPATH": path, "POCKETMQ_NO_EXTENSIONS": pure}
            command = [sys.executable, __file__, "--one", "--backlog", str(args.backlog)]
            command += ["--each", str(args.each)]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            result = (
                json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-300:]}
            )
            print(json.dumps({"round": round_ + 1, "tree": name, "pure": pure == "1", **result}))


if __name__ == "__main__":
    main()
