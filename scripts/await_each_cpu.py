"""A producer awaiting each send against a real ``pocketmq serve``: msg/s and the CPU per send
of both processes (user and system), for comparing two trees on the wall clock.

The broker is the tree on ``PYTHONPATH`` (``pocketmq.testing.BrokerProcess``, defaults, async
flush); the client is the default ``Producer`` sending 1 KiB messages one at a time after 500
warm-up sends. Alternate the trees and run several rounds: the figures move with the machine's
load (docs/benchmarks.md, "A lone send, both sides (issue 32)"):

    PYTHONPATH=src python scripts/await_each_cpu.py 8000
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pocketmq import Message
from pocketmq.client import Admin, Producer
from pocketmq.testing import BrokerProcess

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


async def run(count: int) -> str:
    """Send ``count`` messages one at a time; one line of figures."""
    directory = tempfile.mkdtemp(prefix="await-each-")
    broker = BrokerProcess(Path(directory), http_port=0, extra_args=("--log-level", "warning"))
    try:
        assert broker.process is not None
        async with Admin(servers=broker.address) as admin:
            await admin.create_topic("each")
        body = b"x" * 1024
        async with Producer(servers=broker.address) as producer:
            for _ in range(500):
                await producer.send(Message(topic="each", body=body))
            broker_before, client_before = _cpu(broker.process.pid), os.times()
            started = time.perf_counter()
            for _ in range(count):
                await producer.send(Message(topic="each", body=body))
            elapsed = time.perf_counter() - started
            broker_after, client_after = _cpu(broker.process.pid), os.times()
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
    per = 1e6 / count
    broker_user = (broker_after[0] - broker_before[0]) * per
    broker_sys = (broker_after[1] - broker_before[1]) * per
    client_user = (client_after.user - client_before.user) * per
    client_sys = (client_after.system - client_before.system) * per
    return (
        f"{count / elapsed:8.0f} msg/s  client {client_user + client_sys:5.1f} µs "
        f"(user {client_user:5.1f}, sys {client_sys:5.1f})  broker {broker_user + broker_sys:5.1f}"
        f" µs (user {broker_user:5.1f}, sys {broker_sys:5.1f})"
    )


if __name__ == "__main__":
    print(asyncio.run(run(int(sys.argv[1]))))
