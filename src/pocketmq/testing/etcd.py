"""A real single-member etcd for tests of automatic failover (docs/replication.md §9).

:class:`EtcdProcess` runs Debian's ``etcd`` binary on free loopback ports with its own data
directory; ``stop()`` and ``start()`` keep both, so a test can take etcd away and bring it back
with its state. :func:`require_etcd` finds the binary, or fails under CI and skips elsewhere (as
:func:`~pocketmq.testing.require_service` does for services).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from pocketmq.testing.services import ServiceUnavailable

__all__ = ["EtcdProcess", "require_etcd"]


def require_etcd() -> str:
    """The ``etcd`` binary's path; fails (CI) or skips (elsewhere) when it is not installed."""
    found = shutil.which("etcd")
    if found:
        return found
    reason = "etcd is not installed (Debian: apt-get install etcd-server; make test does it)"
    if os.environ.get("CI"):
        raise ServiceUnavailable(reason)
    import pytest  # only tests call this

    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class EtcdProcess:
    """One etcd member on 127.0.0.1; :attr:`url` is what ``--controller`` takes."""

    def __init__(self, data_dir: Path, *, startup_timeout: float = 20.0) -> None:
        self.binary = require_etcd()
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self._timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "etcd.log"
        self.start()

    @property
    def address(self) -> str:
        """``host:port`` of the client endpoint."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        """The ``--controller`` value for this member."""
        return f"etcd://{self.address}"

    def start(self) -> None:
        """Start (again) on the same ports and data, and wait until it takes connections."""
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [
            self.binary,
            "--name", "test",
            "--data-dir", str(self.data_dir / "member"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"test={peer}",
        ]  # fmt: skip
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited early:\n{self.log_path.read_text()}")
            if "ready to serve client requests" in self.log_path.read_text():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd not ready after {self._timeout}s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        """SIGTERM and wait (etcd keeps its data)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> EtcdProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
