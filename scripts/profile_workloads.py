"""Profile pocketmq's side of the five ``pocketmq bench peers`` workloads with py-spy.

Each workload runs against a default ``pocketmq serve`` (the peers bench's ``PocketPeer``)
while two py-spy recorders sample the broker process and this (client) process separately;
the fifth, a lone send's broker-side path, runs in this process alone: a real ``Broker`` and
the native handlers behind a ``ServerConnection`` fed one SEND frame per read, no socket.
Then every raw profile (py-spy's collapsed stacks) is ranked by function: self % (the
function is the leaf) and total % (it is anywhere on the stack) of the process's busy
samples (py-spy leaves out samples of a thread idle in the event loop's poll).

    pip install py-spy            # the [bench] extra
    PYTHONPATH=src python scripts/profile_workloads.py --out /tmp/profiles [WORKLOAD ...]
    python scripts/profile_workloads.py --rank /tmp/profiles/await-each.broker.txt

Workloads: await-each, in-flight, consume, latency, lone-send (docs/benchmarks.md,
"Where the time goes (issue 32)"). Results are proportions: on a shared machine the rates are
noise, the shape of the profile is not.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

WORKLOADS = ("await-each", "in-flight", "consume", "latency", "lone-send")
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def _recorder(pid: int, out: Path, rate: int, native: bool) -> subprocess.Popen[bytes]:
    command = ["py-spy", "record", "--pid", str(pid), "--rate", str(rate)]
    if not native:
        # reading the process's memory without stopping it: stopping it (ptrace) lands the
        # samples at system calls, which inflated a getpid() to a quarter of a profile
        command.append("--nonblocking")
    command += ["--format", "raw", "--output", str(out), "--threads"]
    if native:
        command.append("--native")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(recorder: subprocess.Popen[bytes]) -> None:
    recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        recorder.wait(60)
    except subprocess.TimeoutExpired:
        recorder.kill()


def _module(path: str) -> str:
    """``.../site-packages/pocketmq/server/native/connection.py`` -> ``pocketmq.server.native.
    connection``; ``<frozen x>`` and built-ins as they are."""
    path = path.replace("\\", "/")
    for marker in ("/src/", "/site-packages/", "/lib/python3.11/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
            break
    return path.removesuffix(".py").replace("/", ".")


def _stacks(raw: Path) -> list[tuple[str, list[str], int]]:
    """(thread, frames as module:function root first, samples) of a raw ``--threads`` profile."""
    stacks = []
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        thread, *frames = stack.split(";")
        names = []
        for frame in frames:
            match = _FRAME.match(frame.strip())
            names.append(
                f"{_module(match['file'])}:{match['function']}" if match else frame.strip()
            )
        stacks.append((thread.rpartition(": ")[2], names, int(count_text)))
    return stacks


#: A leaf that means the loop is waiting for events (py-spy's --nonblocking mode cannot tell
#: an idle thread from a busy one, so the wait is taken out here).
WAITING = "selectors:EpollSelector.select"


class Ranking(NamedTuple):
    """One process's event-loop thread: samples busy and waiting, other threads' samples, and
    (module:function, self %, total %) and (module, self %) of the busy samples."""

    busy: int
    waiting: int
    others: int
    functions: list[tuple[str, float, float]]
    modules: list[tuple[str, float]]


def rank(raw: Path, top: int = 25) -> Ranking:
    """Rank a py-spy raw profile's event-loop thread (``MainThread``) by self time."""
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    modules: collections.Counter[str] = collections.Counter()
    busy = waiting = others = 0
    for thread, names, count in _stacks(raw):
        if thread != "MainThread":
            others += count
            continue
        if not names or names[-1] == WAITING:
            waiting += count
            continue
        busy += count
        own[names[-1]] += count
        modules[names[-1].partition(":")[0]] += count
        for name in set(names):
            anywhere[name] += count
    if not busy:
        return Ranking(0, waiting, others, [], [])
    return Ranking(
        busy,
        waiting,
        others,
        [(n, 100 * c / busy, 100 * anywhere[n] / busy) for n, c in own.most_common(top)],
        [(m, 100 * c / busy) for m, c in modules.most_common(top)],
    )


def print_rank(raw: Path, top: int) -> None:
    """Markdown tables of :func:`rank`."""
    ranking = rank(raw, top)
    total = ranking.busy + ranking.waiting
    print(
        f"\n{raw.name}: {ranking.busy} busy samples on the loop's thread "
        f"({100 * ranking.busy / max(1, total):.0f} %, the rest waiting in epoll), "
        f"{ranking.others} in other threads\n"
    )
    print("| function | self % | total % |\n|---|---:|---:|")
    for name, mine, everywhere in ranking.functions:
        print(f"| `{name}` | {mine:.1f} | {everywhere:.1f} |")
    print("\n| module | self % |\n|---|---:|")
    for module, mine in ranking.modules[:12]:
        print(f"| `{module}` | {mine:.1f} |")


async def _peer_workload(name: str, out: Path, rate: int, native: bool, scale: float) -> None:
    from pocketmq.bench.peers.pocket import PocketPeer

    peer = PocketPeer()
    await peer.start()
    try:
        await peer.publish_each(500)  # warm-up, as the peers bench does
        if name == "consume":
            await peer.fill(int(100_000 * scale))
        [broker_pid] = peer.server_pids
        recorders = [
            _recorder(broker_pid, out / f"{name}.broker.txt", rate, native),
            _recorder(os.getpid(), out / f"{name}.client.txt", rate, native),
        ]
        await asyncio.sleep(1.0)  # py-spy attaches
        started = time.perf_counter()
        if name == "await-each":
            await peer.publish_each(int(5_000 * scale))
        elif name == "in-flight":
            await peer.publish_in_flight(int(50_000 * scale), 256)
        elif name == "consume":
            await peer.consume(int(100_000 * scale))
        elif name == "latency":
            await peer.latency(2_000, 5.0 * scale)
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for recorder in recorders:
            _stop(recorder)
    finally:
        await peer.close()


async def _lone_send(out: Path, rate: int, native: bool, count: int) -> None:
    """A real broker and its native handlers behind a connection with a stub transport: one
    SEND of one 1 KiB message per read, as an await-each producer delivers them."""
    from broker_send_path import greeted_connection  # scripts/, on the path as this script's

    from pocketmq.broker import Broker, BrokerConfig
    from pocketmq.client.convert import to_wire
    from pocketmq.client.message import Message
    from pocketmq.protocol import FrameKind, RequestCode
    from pocketmq.protocol import structs as w
    from pocketmq.protocol.body import encode_body
    from pocketmq.protocol.frames import encode_frame

    directory = tempfile.mkdtemp(prefix="pocketmq-profile-", dir=".")
    broker = Broker(BrokerConfig(data_dir=directory))
    await broker.start()
    try:
        broker.create_topic("lone", queues=8)
        connection, transport = greeted_connection(broker)
        body = b"x" * 1024
        frames = []
        for n in range(count):
            wire = to_wire(Message(topic="lone", body=body))
            wire = w.InboundMessage(wire.topic, wire.body, wire.properties, n % 8, 0, 0)
            request = encode_body(w.SendRequest([wire]))
            frames.append(encode_frame(FrameKind.REQUEST, RequestCode.SEND, n + 2, request))
        recorder = _recorder(os.getpid(), out / "lone-send.broker.txt", rate, native)
        await asyncio.sleep(1.0)
        started = time.perf_counter()
        for n, frame in enumerate(frames):
            connection.data_received(frame)
            if n % 64 == 0:
                await asyncio.sleep(0)  # let the broker's own tasks run, as a loop would
        elapsed = time.perf_counter() - started
        _stop(recorder)
        assert transport.written == count + 1, transport.written
        print(f"lone-send: {elapsed / count * 1e6:.1f} µs per send in-process", file=sys.stderr)
    finally:
        await broker.close()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    """Record the chosen workloads (all by default), then print each profile's ranking."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--out", type=Path, default=Path("profiles"))
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--scale", type=float, default=2.0, help="x the peers bench's counts")
    parser.add_argument("--rank", type=Path, nargs="*", help="only rank these raw profiles")
    args = parser.parse_args()
    if args.rank:
        for raw in args.rank:
            print_rank(raw, args.top)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
        if name == "lone-send":
            asyncio.run(_lone_send(args.out, args.rate, args.native, int(20_000 * args.scale)))
        else:
            asyncio.run(_peer_workload(name, args.out, args.rate, args.native, args.scale))
        for raw in sorted(args.out.glob(f"{name}.*.txt")):
            print_rank(raw, args.top)


if __name__ == "__main__":
    main()
