"""``pocketmq serve --grpc-workers N``: the broker's gRPC port served by N proxy processes.

One Python process runs on one core, and gRPC costs the official clients' broker several times
the CPU of the work it asks for (docs/benchmarks.md). With workers, the broker process keeps its
queues and speaks only the native protocol; N ``pocketmq proxy`` children share the gRPC port
(``SO_REUSEPORT``: the kernel spreads connections over them) and forward each call to it
(docs/proxy.md). A worker that dies is started again; clients reconnect to a live one and lose
nothing, since a proxy holds no state of theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Final

__all__ = [
    "GATEWAY_SECRET_VARIABLE",
    "ProxyWorkers",
    "metrics_port",
    "reserve_port",
    "worker_options",
]

GATEWAY_SECRET_VARIABLE: Final = "POCKETMQ_GATEWAY_SECRET"
"""The environment variable that hands a worker the secret of the broker's gateway identity."""

log = logging.getLogger("pocketmq.server.workers")

READY_TIMEOUT: Final = 60.0
"""How long a worker may take to print its ready line (imports grpc, connects, listens)."""
_LINE_LIMIT: Final = 1024 * 1024  # a worker's longest log line read whole
DEFAULT_SILENCE: Final = 30.0
"""A worker that has not asked GATEWAY_INFO for this long is hung: killed and started again."""
RESTART_DELAY: Final = 1.0
"""The pause before a worker that died is started again (no tight crash loop)."""
_STOP_TIMEOUT: Final = 10.0


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, not listening, ``SO_REUSEPORT`` socket on ``host:port`` (0: a free port): it holds
    the port for the workers (who bind it the same way) against anyone else meanwhile."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((host, port))
    except OSError:
        holder.close()
        raise
    return holder


def metrics_port(http_port: int | None, number: int) -> int | None:
    """Where worker ``number`` serves ``/metrics``: the broker's HTTP port + 1 + its number
    (5558, 5559, ... beside the default 5557: the same port after every restart, so a
    Prometheus target list stays true), any free port when the broker's is 0, none when the
    broker serves no HTTP (docs/operations.md, "Proxies measured")."""
    if http_port is None:
        return None
    return http_port + 1 + number if http_port else 0


def worker_options(
    *,
    data_dir: str,
    host: str,
    authentication: bool,
    authorization: bool,
    insecure: bool,
    grpc_tls: str,
    tls_cert: str | None,
    tls_key: str | None,
) -> list[str]:
    """The ``pocketmq proxy`` options that make a worker as strict as its broker: the same users
    and rules, the same gRPC TLS mode and certificate (the broker's, or its self-signed one), and
    the broker's certificate pinned when the native port speaks TLS (docs/proxy.md)."""
    options: list[str] = []
    if authentication:
        options += ["--data-dir", data_dir, "--authentication"]
    if authorization:
        options.append("--authorization")
    if insecure:  # the broker's own choice for its host, which its workers share
        options.append("--insecure")
    if grpc_tls != "disabled":
        cert, key = tls_cert, tls_key
        if not (cert and key):
            from pocketmq.server.auth.certificates import self_signed

            cert, key = self_signed(os.path.join(data_dir, "config"), [host])
        options += ["--tls-cert", cert, "--tls-key", key, "--grpc-tls", grpc_tls]
    if tls_cert:
        options += ["--broker-ca", tls_cert]
    return options


class ProxyWorkers:
    """``count`` proxy processes for the broker at ``broker_address``, sharing ``host:port`` and
    advertising ``advertise`` (module doc)."""

    def __init__(
        self,
        count: int,
        broker_address: str,
        host: str,
        port: int,
        advertise: str,
        *,
        options: Sequence[str] = (),
        gateway_secret: str = "",
        silence: float = DEFAULT_SILENCE,
        http_port: int | None = None,
        http_options: Sequence[str] = (),
    ) -> None:
        self._count = count
        self._http_port = http_port  # the broker's: each worker's metrics port follows from it
        self._http_options = list(http_options)
        self.metrics_addresses = [""] * count  # host:port of each worker's /metrics
        self._silence = silence
        self._seen: dict[int, float] = {}  # worker pid -> when it last asked GATEWAY_INFO
        self._watchdog: asyncio.Task[None] | None = None
        # the secret goes by environment, never on a command line others can read
        self._environment = {**os.environ, GATEWAY_SECRET_VARIABLE: gateway_secret}
        self._command = [
            sys.executable,
            "-m",
            "pocketmq",
            "proxy",
            "--broker",
            broker_address,
            "--host",
            host,
            "--grpc-port",
            str(port),
            "--advertise",
            advertise,
            "--reuse-port",
            "--exit-with-stdin",  # a killed broker takes its workers with it
            "--ping-interval",
            str(silence / 6),
            "--log-level",
            logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower(),
            *options,
        ]
        self._processes: list[asyncio.subprocess.Process | None] = [None] * count
        self._supervisors: list[asyncio.Task[None]] = []
        self._relays: dict[int, asyncio.Task[None]] = {}
        self._closing = False

    async def start(self) -> None:
        """Start every worker and wait until each serves; an ``OSError`` says why one could not."""
        try:
            await asyncio.gather(*(self._spawn(number) for number in range(self._count)))
        except BaseException:
            await self.close()
            raise
        self._supervisors = [
            asyncio.create_task(self._supervise(number), name=f"grpc-worker-{number}")
            for number in range(self._count)
        ]
        self._watchdog = asyncio.create_task(self._watch(), name="grpc-worker-watchdog")

    def alive(self, client_id: str) -> None:
        """A worker asked ``GATEWAY_INFO`` (its client id ends with ``@<pid>``): it is alive."""
        pid = client_id.rpartition("@")[2]
        if pid.isdigit():
            self._seen[int(pid)] = time.monotonic()

    async def _watch(self) -> None:
        """Kill a worker that has gone silent (hung, not dead: its loop no longer runs), so the
        supervisor starts a new one; a round the broker's own loop was too late for is skipped
        (the silence may be ours)."""
        every = self._silence / 4
        last = time.monotonic()
        while not self._closing:
            await asyncio.sleep(every)
            now = time.monotonic()
            late, last = now - last > 2 * every, now
            if late:
                continue
            for process in self._processes:
                if process is None or process.returncode is not None:
                    continue
                seen = self._seen.get(process.pid)
                if seen is not None and now - seen > self._silence:
                    log.error(
                        "gRPC worker pid %d silent for %.0fs: killing it", process.pid, now - seen
                    )
                    self._seen.pop(process.pid, None)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()

    def _command_for(self, number: int) -> list[str]:
        port = metrics_port(self._http_port, number)
        if port is None:
            return self._command
        return [
            *self._command,
            "--http-port",
            str(port),
            "--worker",
            str(number),
            *self._http_options,
        ]

    def figures(self) -> list[tuple[int, int, str, bool]]:
        """Each worker's (number, pid, metrics address, running) for the cluster view."""
        out = []
        for number, process in enumerate(self._processes):
            running = process is not None and process.returncode is None
            pid = process.pid if process is not None else 0
            out.append((number, pid, self.metrics_addresses[number], running))
        return out

    async def _spawn(self, number: int) -> None:
        process = await asyncio.create_subprocess_exec(
            *self._command_for(number),
            stdin=asyncio.subprocess.PIPE,  # never written: closing it stops the worker
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self._environment,
            limit=_LINE_LIMIT,
        )
        self._processes[number] = process
        assert process.stdout is not None
        seen: list[str] = []
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                while True:
                    raw = await _read_line(process.stdout)
                    if not raw:
                        await process.wait()
                        tail = " | ".join(seen[-3:]) or "no output"
                        raise OSError(
                            f"gRPC worker {number} exited ({process.returncode}) before "
                            f"serving: {tail}"
                        )
                    line = raw.decode(errors="replace").rstrip()
                    if line.startswith("pocketmq proxy ready"):
                        self.metrics_addresses[number] = _ready_field(line, "http")
                        break
                    seen.append(line)
        except TimeoutError:
            process.kill()
            raise OSError(
                f"gRPC worker {number} did not serve within {READY_TIMEOUT:.0f}s"
            ) from None
        log.info("gRPC worker %d (pid %d) serving", number, process.pid)
        self._seen[process.pid] = time.monotonic()  # its silence counts from now
        self._relays[number] = asyncio.create_task(
            self._relay(number, process.stdout), name=f"grpc-worker-log-{number}"
        )

    @staticmethod
    async def _relay(number: int, output: asyncio.StreamReader) -> None:
        """A worker's log lines, in the broker's log; the pipe is read to its end whatever it
        holds (a worker blocked on a full pipe would serve nobody and never be restarted)."""
        while raw := await _read_line(output):
            log.info("worker %d: %s", number, raw.decode(errors="replace").rstrip())

    async def _supervise(self, number: int) -> None:
        while not self._closing:
            process = self._processes[number]
            if process is not None:
                code = await process.wait()
                self._seen.pop(process.pid, None)
                if self._closing:
                    return
                log.warning("gRPC worker %d exited (%s): starting it again", number, code)
            await asyncio.sleep(RESTART_DELAY)
            try:
                await self._spawn(number)
            except Exception as exc:  # whatever went wrong, try again after the pause
                log.error("gRPC worker %d could not start: %s", number, exc)
                self._processes[number] = None

    async def close(self) -> None:
        """Stop the workers (SIGTERM, then SIGKILL after a grace period)."""
        self._closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        for task in self._supervisors:
            task.cancel()
        for task in self._supervisors:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        running = [p for p in self._processes if p is not None and p.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        for process in running:
            try:
                await asyncio.wait_for(process.wait(), _STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def _ready_field(line: str, name: str) -> str:
    """A ``name=value`` of a ready line ("" when absent or ``disabled``)."""
    for part in line.split():
        key, _, value = part.partition("=")
        if key == name and value != "disabled":
            return value
    return ""


async def _read_line(output: asyncio.StreamReader) -> bytes:
    """The next line of a worker's output, or a chunk of a line too long to hold; b"" at the
    end."""
    try:
        return await output.readline()
    except (ValueError, asyncio.LimitOverrunError):
        return await output.read(_LINE_LIMIT)
