"""System calls per delivered message in the e2e latency workload (docs/benchmarks.md, "Writes
per delivered message (issue 32)").

Runs ``pocketmq bench latency``'s workload — a paced producer and the default push consumer in
this one process, against a broker process started here — and, after the warm-up, attaches
``perf stat`` to the broker and to this process for exactly ``--count`` messages, then prints
each side's system calls per delivered message. ``--trace DIR`` keeps a sequence trace of
both sides instead (``perf trace``, the read/write/epoll calls), for reading by eye: it slows
both sides, so more messages share a write than untraced.

    PYTHONPATH=src python scripts/e2e_syscalls.py --rate 2000 --count 4000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from pocketmq.bench.broker import BODY, _topic
from pocketmq.client import (
    ConsumeStatus,
    Message,
    MessageView,
    Producer,
    PushConsumer,
    PushConsumerConfig,
)
from pocketmq.testing.process import BrokerProcess

_CALLS = "write sendto sendmsg read recvfrom epoll_wait epoll_pwait pwrite64 pread64 getpid futex"
_SEQUENCE = ",".join(_CALLS.split())
_COUNTED = ",".join(
    ["raw_syscalls:sys_enter", "context-switches"]
    + [f"syscalls:sys_enter_{c}" for c in _CALLS.split()]
)


def _attach(pid: int, out: Path, trace: bool) -> subprocess.Popen[bytes]:
    if trace:
        args = ["perf", "trace", "-o", str(out), "-e", _SEQUENCE, "-p", str(pid)]
    else:  # counting tracepoints does not stop the process (strace -c does, and batches it)
        args = ["perf", "stat", "-x", ",", "-o", str(out), "-e", _COUNTED, "-p", str(pid)]
    return subprocess.Popen(args, stderr=subprocess.DEVNULL)


async def _run(
    address: str, broker_pid: int, rate: int, count: int, out: Path, trace: bool
) -> None:
    await _topic(address, "bench-latency", group="bench-latency", queues=4)
    got = 0
    all_in = asyncio.Event()

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        nonlocal got
        got += sum(1 for m in messages if "warmup" not in m.properties)
        if got >= count:
            all_in.set()
        return ConsumeStatus.SUCCESS

    config = PushConsumerConfig(report_outcomes=False)  # as `pocketmq bench latency` runs it
    async with (
        PushConsumer("bench-latency", "bench-latency", listener, servers=address, config=config),
        Producer(servers=address) as producer,
    ):
        await asyncio.sleep(0.5)
        interval = 1.0 / rate
        for _ in range(500):
            await producer.send(
                Message(topic="bench-latency", body=BODY, properties={"warmup": "1"})
            )
            await asyncio.sleep(interval)
        await asyncio.sleep(0.5)
        tracers = [
            _attach(broker_pid, out / "broker.perf", trace),
            _attach(os.getpid(), out / "client.perf", trace),
        ]
        await asyncio.sleep(1.5)  # attached (perf prints nothing when ready: give it time)
        start = time.perf_counter()
        pending: set[asyncio.Task[object]] = set()
        for n in range(count):
            delay = start + n * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = producer.send_async(
                Message(topic="bench-latency", body=BODY, properties={"t": "0"})
            )
            pending.add(task)  # type: ignore[arg-type]
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        await asyncio.wait_for(all_in.wait(), 60)
        for tracer in tracers:
            tracer.send_signal(signal.SIGINT)
        for tracer in tracers:
            tracer.wait(10)


def _summary(path: Path, count: int) -> str:
    lines = [f"{path.name}: per delivered message ({count} messages)"]
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) >= 3 and fields[0].isdigit():
            name = fields[2].removeprefix("syscalls:sys_enter_")
            lines.append(f"  {name:<24} {int(fields[0]) / count:6.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--trace", type=Path, help="keep a sequence trace in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pocketmq-e2e-") as tmp:
        out = args.trace or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(
            Path(tmp) / "broker",
            flush="async",  # as `pocketmq bench latency` starts it
            grpc_port=None,
            config={"broker": {"record_history": False}},
            extra_args=("--log-level", "warning"),
        )
        try:
            assert broker.process is not None
            run = _run(
                broker.native, broker.process.pid, args.rate, args.count, out, bool(args.trace)
            )
            asyncio.run(run)
        finally:
            broker.stop()
        if not args.trace:
            print(_summary(out / "broker.perf", args.count))
            print(_summary(out / "client.perf", args.count))


if __name__ == "__main__":
    main()
