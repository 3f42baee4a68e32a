"""What paces a drain (issue 32): timestamps and counters around the push consumer's pulls.

Used by ``scripts/consume_drain.py --trace``. It wraps ``Connection.request`` to stamp each
``PULL`` (queue, sent, answered, messages), samples the consumer every millisecond on its own
loop (pulls in flight, batches waiting in the work queue, pullers waiting for room in it, workers
waiting for a batch) and, from a thread, both processes' CPU every 20 ms, then summarises:
each process's busy fraction (CPU s / wall s), the pull round trip, how long a queue's loop
spends between an answer and its next pull (the consumer's flow-control waits), and the share of
samples in which the workers had nothing to do (docs/benchmarks.md, "Consume rate against
Redis").
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds, the CPU it last ran on) of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[36])


def _machine() -> float:
    """CPU seconds all cores spent busy so far (``/proc/stat``: all but idle and iowait)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


class DrainTrace:
    """Stamps and samples one drain; :meth:`start` once the consumer exists, :meth:`stop` after."""

    def __init__(self, broker_pid: int) -> None:
        from pocketmq.client.connection import ClientConnection as Connection
        from pocketmq.protocol import RequestCode

        self.pulls: list[tuple[int, float, float, int]] = []  # queue, sent, answered, count
        self.samples: list[tuple[float, int, int, int, int]] = []
        self.cpu: list[tuple[float, float, float, bool, float]] = []
        """time, client and broker CPU s, on the same core, the machine's busy CPU s"""
        self._in_flight = 0
        self._broker = broker_pid
        self._running = False
        original, pulls, pull = Connection.request, self.pulls, RequestCode.PULL
        trace = self

        async def request(self: Any, code: Any, body: Any, *args: Any, **kwargs: Any) -> Any:
            if code != pull:
                return await original(self, code, body, *args, **kwargs)
            sent = time.perf_counter()
            trace._in_flight += 1
            try:
                reply = await original(self, code, body, *args, **kwargs)
            finally:
                trace._in_flight -= 1
            pulls.append((body.queue_id, sent, time.perf_counter(), len(reply.messages)))
            return reply

        Connection.request = request  # type: ignore[method-assign]

    def start(self, consumer: Any) -> None:
        """Sample ``consumer`` (a started ``PushConsumer``) until :meth:`stop`."""
        self._running = True
        loop = asyncio.get_running_loop()
        work = consumer._state.work

        def sample() -> None:
            if not self._running:
                return
            self.samples.append(
                (
                    time.perf_counter(),
                    self._in_flight,
                    len(work),
                    len(work._putters),
                    len(work._getters),
                )
            )
            loop.call_later(0.001, sample)

        sample()
        threading.Thread(target=self._cpu_loop, daemon=True).start()

    def _cpu_loop(self) -> None:
        me = os.getpid()
        while self._running:
            (client, on), (broker, where) = _cpu(me), _cpu(self._broker)
            self.cpu.append((time.perf_counter(), client, broker, on == where, _machine()))
            time.sleep(0.02)

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the summary."""
        self._running = False
        pulls = sorted(self.pulls, key=lambda p: p[1])
        if not pulls or not self.samples:
            return {}
        began, ended = pulls[0][1], pulls[-1][2]
        wall = ended - began
        rtt = [(p[2] - p[1]) * 1e3 for p in pulls if p[3]]
        gaps: list[float] = []  # answer -> next pull of the same queue
        last: dict[int, float] = {}
        for queue, sent, answered, _ in pulls:
            if queue in last:
                gaps.append((sent - last[queue]) * 1e3)
            last[queue] = answered
        answers = sorted(p[2] for p in pulls)
        quiet = [(b - a) * 1e3 for a, b in itertools.pairwise(answers)]
        stalls = [g for g in quiet if g > 5]
        inside = [s for s in self.samples if began <= s[0] <= ended]
        cpu = [c for c in self.cpu if began <= c[0] <= ended]

        def q(values: list[float], at: float) -> float:
            return round(statistics.quantiles(values, n=100)[int(at) - 1], 2) if values else 0.0

        busy = {}
        if len(cpu) > 1:
            span = cpu[-1][0] - cpu[0][0]
            busy = {
                "client_busy": round((cpu[-1][1] - cpu[0][1]) / span, 2),
                "broker_busy": round((cpu[-1][2] - cpu[0][2]) / span, 2),
                "same_core_share": round(sum(c[3] for c in cpu) / len(cpu), 2),
                "others_busy": round(
                    (cpu[-1][4] - cpu[0][4] - sum(cpu[-1][1:3]) + sum(cpu[0][1:3])) / span, 2
                ),
            }
        n = max(1, len(inside))
        return {
            "pulls": len(pulls),
            "rtt_ms_p50": q(rtt, 50),
            "rtt_ms_p90": q(rtt, 90),
            "gap_ms_p50": q(gaps, 50),
            "gap_ms_p90": q(gaps, 90),
            "gap_ms_sum_per_queue": round(sum(gaps) / max(1, len(last)), 1),
            "wall_ms": round(wall * 1e3, 1),
            "stalls_over_5ms": len(stalls),
            "stalled_ms": round(sum(stalls), 1),
            "stall_ms_max": round(max(stalls, default=0.0), 1),
            "in_flight_mean": round(sum(s[1] for s in inside) / n, 2),
            "work_empty_share": round(sum(1 for s in inside if s[2] == 0) / n, 2),
            "workers_waiting_mean": round(sum(s[4] for s in inside) / n, 2),
            "pullers_blocked_mean": round(sum(s[3] for s in inside) / n, 2),
            **busy,
        }
