"""The runnable example in ``examples/exactly_once.py`` (quoted in docs/reliability.md) runs
end to end: through a real broker it starts, with a lost ack and a producer resend."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess
from pocketmq.testing.services import require_service

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "exactly_once.py"


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_example_with_sqlite() -> None:
    out = run()
    assert "delivered 3 times, payments recorded: 1, stub CONFIRMED" in out
    assert "handled 1, duplicates 2" in out


def test_example_goes_through_the_broker_it_is_given(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, grpc_port=None) as broker:
        out = run("--server", broker.native)
        match = re.search(r"message (\w+): delivered 3 times, payments recorded: 1,", out)
        assert match, out
        with SyncAdmin(servers=broker.native) as admin:
            copies = admin.run(lambda a: a.query_message(match.group(1)))
    mine = [c for c in copies if c.topic.startswith("order-paid-")]
    # the relay's send and the producer's resend, and the broker's redelivery after the lost ack
    assert sorted(c.delivery_attempt for c in mine) == [1, 1, 2]


@pytest.mark.postgres
def test_example_with_postgres() -> None:
    require_service("postgres")
    out = run("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    assert "delivered 3 times, payments recorded: 1, stub CONFIRMED" in out
