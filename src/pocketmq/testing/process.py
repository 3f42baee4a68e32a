"""Real broker and name-server processes for tests, on free loopback ports.

Integration tests talk to a broker exactly as users do: a separate ``pocketmq serve`` process,
found by the ready line it prints. Its log goes to ``<data dir>/broker.log`` so a failing test
can show what the broker said. ``kill()`` is a real SIGKILL; ``restart()`` reopens the same data
directory on the same ports.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["BrokerProcess", "NameServerProcess", "write_config"]

_READY = re.compile(
    r"pocketmq ready native=(\S+) grpc=(\S+) namesrv=(\S+)(?: ha=(\S+))?(?: role=(\S+))?"
    r"(?: http=(\S+))?"
)
_NAMESRV_READY = re.compile(r"pocketmq namesrv ready namesrv=(\S+)")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{_toml_value(str(k))} = {_toml_value(v)}" for k, v in value.items())
            + "}"
        )
    return repr(value)


def write_config(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    """Write a ``pocketmq serve --config`` TOML file from nested dicts."""
    lines: list[str] = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def _wait_for_line(
    process: subprocess.Popen[str], pattern: re.Pattern[str], log: Path, timeout: float
) -> re.Match[str]:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    buffered = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"process exited with {process.returncode} before it was ready:\n"
                f"{log.read_text() if log.exists() else ''}"
            )
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            buffered += os.read(process.stdout.fileno(), 4096).decode()
            match = pattern.search(buffered)
            if match:
                return match
    process.kill()
    process.wait()
    raise RuntimeError(f"not ready after {timeout}s:\n{log.read_text() if log.exists() else ''}")


def _spawn(
    command: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start a pocketmq process with its stdout piped (for the ready line) and its stderr
    appended to ``log_path`` (what a failing test shows); ``env`` adds to the environment."""
    with open(log_path, "a") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )


def _terminate(process: subprocess.Popen[str], timeout: float) -> int:
    """SIGTERM, wait up to ``timeout`` for a graceful exit, then SIGKILL; close the stdout pipe.
    Returns the exit code (a graceful shutdown is 0)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
    return process.returncode


class BrokerProcess:
    """A running ``pocketmq serve``. Use as a context manager, or call ``stop()``. ``env`` adds
    variables to its environment (e.g. libfaketime's, to step its wall clock)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        config: dict[str, dict[str, Any]] | None = None,
        namesrv: str | None = None,
        broker_name: str | None = None,
        flush: str | None = None,
        port: int = 0,
        grpc_port: int | None = 0,
        namesrv_port: int = 0,
        ha_port: int | None = None,
        http_port: int | None = None,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._config = config
        self._namesrv = namesrv
        self._broker_name = broker_name
        self._flush = flush
        self._port = port
        self._grpc_port = grpc_port
        self._namesrv_port = namesrv_port
        self._ha_port = ha_port
        self._http_port = http_port
        self._extra = extra_args
        self._timeout = startup_timeout
        self._env = env
        self.process: subprocess.Popen[str] | None = None
        self.native = self.grpc = self.namesrv = self.ha = self.http = ""
        self.role = "master"
        self.log_path = self.data_dir / "broker.log"
        self._start()

    def _command(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "pocketmq",
            "serve",
            "--data-dir",
            str(self.data_dir / "data"),
            "--port",
            str(self._port),
        ]
        if self._grpc_port is not None:
            command += ["--grpc-port", str(self._grpc_port)]
        else:
            command.append("--no-grpc")
        if self._namesrv is not None:
            command += ["--namesrv", self._namesrv]
        else:
            command += ["--namesrv-port", str(self._namesrv_port)]
        if self._broker_name:
            command += ["--broker-name", self._broker_name]
        if self._ha_port is not None:
            command += ["--ha-port", str(self._ha_port)]
        if self._http_port is not None:
            command += ["--http-port", str(self._http_port)]
        else:
            command.append("--no-http")
        if self._flush:
            command += ["--flush", self._flush]
        if self._config:
            command += ["--config", str(write_config(self.data_dir / "broker.toml", self._config))]
        return command + list(self._extra)

    def _start(self) -> None:
        self.process = _spawn(self._command(), self.log_path, self._env)
        try:
            match = _wait_for_line(self.process, _READY, self.log_path, self._timeout)
        except BaseException:
            self._close_pipes()  # the process exited (or was killed): do not leak its pipe
            raise
        self.native, self.grpc, self.namesrv, ha, role, http = match.groups()
        self.http = "" if http in (None, "disabled") else http
        self.ha = "" if ha in (None, "none") else ha
        self.role = role or "master"
        # restarts keep the same ports so clients can reconnect
        self._port = int(self.native.rsplit(":", 1)[1])
        if self.grpc != "disabled":
            self._grpc_port = int(self.grpc.rsplit(":", 1)[1])
        if self.ha:
            self._ha_port = int(self.ha.rsplit(":", 1)[1])
        if self.http:
            self._http_port = int(self.http.rsplit(":", 1)[1])
        if self._namesrv is None and self.namesrv != "none":
            self._namesrv_port = int(self.namesrv.rsplit(":", 1)[1])

    @property
    def address(self) -> str:
        """The native protocol's ``host:port``, what the SDK and the CLI connect to."""
        return self.native

    @property
    def running(self) -> bool:
        """Whether the process is still alive (a test that killed it, or a broker that refused
        to start, is not)."""
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait: a graceful shutdown. Returns the exit code."""
        if self.process is None:
            return 0
        return _terminate(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL: the broker gets no chance to flush or persist anything."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._close_pipes()

    def restart(self) -> None:
        """Stop (gracefully, if it still runs) and start again on the same data directory and
        ports, so clients reconnect to the address they already have."""
        if self.running:
            self.stop()
        self._start()

    def _close_pipes(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def log(self) -> str:
        """Everything the broker wrote to stderr, for a failing test's message."""
        return self.log_path.read_text() if self.log_path.exists() else ""

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class NameServerProcess:
    """A running ``pocketmq namesrv``, for tests of a cluster of brokers that register with one
    name server. Use as a context manager, or call ``stop()``."""

    def __init__(
        self,
        log_dir: Path,
        *,
        port: int = 0,
        startup_timeout: float = 30.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "namesrv.log"
        self.process = _spawn(
            [sys.executable, "-m", "pocketmq", "namesrv", "--port", str(port), *extra_args],
            self.log_path,
        )
        self.address = _wait_for_line(
            self.process, _NAMESRV_READY, self.log_path, startup_timeout
        ).group(1)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait: a graceful shutdown. Returns the exit code."""
        return _terminate(self.process, timeout)

    def __enter__(self) -> NameServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
