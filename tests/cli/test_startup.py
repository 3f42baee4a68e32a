"""``pocketmq send`` starts fast because it imports only what sending needs.

A CLI send used to take ~0.3 s, most of it importing the broker, the store, rich and every SDK
client before the first byte was sent (docs/benchmarks.md, "CLI start-up"). Timing a process in
a test would be flaky; the import set is what decides the time, so the test checks that.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

# Modules a one-message send has no use for: heavy third-party packages, and pocketmq's server
# side, pipelines, reliability toolkit and the clients a send does not use.
NOT_FOR_A_SEND = (
    "grpc",
    "pyspark",
    "sqlalchemy",
    "rich",
    "redis",
    "rocketmq",
    "pocketmq.broker",
    "pocketmq.store",
    "pocketmq.server",
    "pocketmq.pipeline",
    "pocketmq.reliability",
    "pocketmq.bench",
    "pocketmq.client.admin",
    "pocketmq.client.admin_types",
    "pocketmq.client.consumer",
    "pocketmq.client.producer.transaction",
    "pocketmq.client.producer.outcomes",
    "pocketmq.client.producer.checks",
    "pocketmq.client.producer.heartbeat",
    "pocketmq.client.sync",
)

# Runs the real command in a fresh interpreter and writes the modules it imported at exit.
_SCRIPT = """
import atexit, runpy, sys
out, server = sys.argv[1], sys.argv[2]

@atexit.register
def write_modules():
    with open(out, "w") as file:
        file.write("\\n".join(sorted(sys.modules)))

sys.argv = ["pocketmq", "send", "some-topic", "body", "--server", server]
runpy.run_module("pocketmq", run_name="__main__")
"""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_cli_send_imports_only_the_producer(tmp_path: Path) -> None:
    out = tmp_path / "modules.txt"
    # nothing listens there: the send fails at once, after every import a send makes
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out), f"127.0.0.1:{_closed_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "POCKETMQ_SERVER": ""},
    )
    assert done.returncode == 1, done.stderr
    assert "BrokerConnectionError" in done.stderr
    modules = set(out.read_text().split())
    assert "pocketmq.client.producer" in modules  # the send really got that far
    unwanted = sorted(
        m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_FOR_A_SEND)
    )
    assert not unwanted, f"pocketmq send imported {unwanted}"
