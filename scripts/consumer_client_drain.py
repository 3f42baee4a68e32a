"""The push consumer's whole client side of a real drain, for instruction counts (issue 32).

``scripts/consumer_worker_path.py`` counts the worker path alone; this counts everything the
client does per consumed message — the pull requests and answers on a real socket, the
decoding of the answers, the hand-over to the work queue, the workers, the outcome reports and
the offset commits — with a real broker in another process, which callgrind does not slow
down. ``fill`` starts a broker and fills one topic per count given; ``drain`` (run under
callgrind) consumes one of them with the default ``PushConsumer``; without a mode, both: two
drains of different sizes, whose difference in instructions over the difference in messages
is the client's instructions per consumed message (the start, rebalance and close cancel out;
docs/benchmarks.md, "The push consumer's client CPU per message"):

    PYTHONHASHSEED=0 PYTHONPATH=src:scripts python scripts/consumer_client_drain.py 2000 12000
    (POCKETMQ_NO_EXTENSIONS=1 for pure Python; --keep DIR keeps the callgrind outputs)

``drain ADDRESS TOPIC COUNT [batch]`` alone runs one drain against a broker already filled
(e.g. under ``py-spy record --native``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


async def _fill(address: str, counts: list[int]) -> None:
    from pocketmq.bench.broker import in_flight
    from pocketmq.client import Admin, Message, Producer

    async with Admin(servers=address) as admin:
        for n in counts:
            await admin.create_topic(f"drain{n}")
            await admin.create_group(f"drain{n}")
    async with Producer(servers=address) as producer:
        for n in counts:
            message = Message(topic=f"drain{n}", body=b"x" * 1024)
            await in_flight(n, 1024, functools.partial(producer.send, message))
    await asyncio.sleep(1.0)  # the broker's flush and dispatch settle


async def _drain(address: str, topic: str, count: int, batch: int) -> None:
    from side_by_side import counting_listener

    from pocketmq.client import PushConsumer, PushConsumerConfig

    done, listener = counting_listener(count)
    config = PushConsumerConfig(batch_size=batch)
    async with PushConsumer(topic, topic, listener, servers=address, config=config):
        await asyncio.wait_for(done.wait(), 900)


def _instructions(path: Path) -> int:
    match = re.search(r"^summary:\s+(\d+)", path.read_text(), re.M)
    assert match is not None, path
    return int(match[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("args", nargs="+", help="COUNT COUNT, or drain ADDRESS TOPIC COUNT")
    parser.add_argument("--batch", type=int, default=1, help="the listener's batch size")
    parser.add_argument("--keep", help="a directory for the callgrind outputs")
    args = parser.parse_args()
    if args.args[0] == "drain":
        _, address, topic, count = args.args
        asyncio.run(_drain(address, topic, int(count), args.batch))
        return
    from side_by_side import start_broker

    counts = [int(n) for n in args.args]
    directory, broker = start_broker("client-drain-")
    out = Path(args.keep or tempfile.mkdtemp(prefix="client-drain-cg-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(_fill(broker.address, counts))
        totals = []
        for n in counts:
            target = out / f"callgrind.{n}"
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={target}"]
            command += [
                sys.executable,
                str(Path(__file__).resolve()),
                "drain",
                broker.address,
                f"drain{n}",
                str(n),
            ]
            command += ["--batch", str(args.batch)]
            subprocess.run(command, check=True, capture_output=True, env=os.environ)
            totals.append(_instructions(target))
            print(f"{n} messages: {totals[-1]:,} instructions", flush=True)
        for i in range(1, len(counts)):
            a, b, ia, ib = counts[i - 1], counts[i], totals[i - 1], totals[i]
            print(f"per message ({a}..{b}): {(ib - ia) / (b - a):,.0f}")
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
