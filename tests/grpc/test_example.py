"""``examples/official_client.py`` (quoted in docs/grpc.md) runs against a real broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "official_client.py"


def test_official_client_example(broker: BrokerProcess, admin: SyncAdmin) -> None:
    admin.create_topic("orders", queues=4)
    admin.create_group("billing")
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), broker.grpc],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sent = done.stdout.splitlines()[0].split()[1]
    assert f"received {sent} order 42 created {{'region': 'eu'}}" in done.stdout
