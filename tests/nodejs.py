"""The Python side of the suites' Node.js drivers (tests/grpc/node, tests/remoting/node).

Each suite pins an npm package next to its ``driver.js`` (installed by
``scripts/prerequisites.sh``); the driver is one long-lived ``node`` process taking one JSON
command per line and answering one JSON line per command (tests/nodejs_lines.js is its
JavaScript side). What differs between the suites is the package and the driver's commands,
so only that stays in their conftest.py.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest


def require_npm_package(
    project: Path, package: str, what: str, unavailable: type[Exception]
) -> Path:
    """``project`` when ``node`` and its ``package`` are installed; otherwise raise
    ``unavailable`` under CI (a missing client must not pass as skipped) or skip the test."""
    node = shutil.which("node")
    if node is not None and (project / "node_modules" / package / "package.json").exists():
        return project
    if node is None:
        reason = "`node` is not on PATH: install Node.js 18+, then run scripts/prerequisites.sh"
    else:
        reason = (
            f"{what} is not installed in {project} "
            "(run scripts/prerequisites.sh, or `npm ci` in that directory)"
        )
    if os.environ.get("CI"):
        raise unavailable(reason)
    pytest.skip(reason)


class DriverError(Exception):
    """A driver command that failed: the JavaScript error's name, code and message."""

    def __init__(self, name: str, code: int | None, message: str) -> None:
        super().__init__(f"{name} (code {code}): {message}")
        self.name = name
        self.code = code
        self.message = message


class LineDriver:
    """``node driver.js`` in ``project``: :meth:`call` sends one command, returns its result
    or raises :attr:`error` with what the driver reported. The clients' own files (log files
    under ``$HOME``) go to ``log_dir``, next to the driver's stderr ``log_name``."""

    error: type[DriverError] = DriverError

    def __init__(self, project: Path, log_dir: Path, log_name: str) -> None:
        self.log_path = log_dir / log_name
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                ["node", "driver.js"],
                cwd=project,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, "HOME": str(log_dir)},
            )
        self._ids = 0
        self._buffer = b""

    def call(self, op: str, timeout: float = 30.0, **fields: Any) -> Any:
        """Run command ``op`` with ``fields``; its answer's result within ``timeout`` s."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._ids += 1
        command = {"id": self._ids, "op": op, **fields}
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            line, newline, rest = self._buffer.partition(b"\n")
            if newline:
                self._buffer = rest
                answer = json.loads(line)
                if answer["id"] != command["id"]:
                    continue  # the answer to a command that timed out earlier
                if "error" in answer:
                    error = answer["error"]
                    raise self.error(error["name"], error["code"], error["message"])
                return answer["result"]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.log_path.stem} did not answer {op} within {timeout} s")
            ready, _, _ = select.select([self.process.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(
                        f"{self.log_path.stem} exited ({self.process.wait()}):\n"
                        + self.log_path.read_text()
                    )
                self._buffer += chunk

    def close(self, timeout: float = 10.0) -> None:
        """Close stdin (the driver closes its clients and exits); kill it if it lingers."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
