"""A repaired slave never holds a hole (docs/replication.md §4, §6; issue 29 item 1).

A byte flipped in a slave's log: the slave refuses to start, ``pocketmq store repair`` sets the
damaged record aside, and the slave comes back. It copies everything from that record on again
from its master, so a promotion later keeps every message acknowledged OK. A slave that could
not copy it yet (its master is down) is refused promotion without ``--force``, with what would be
lost.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from pocketmq.client import SendStatus
from pocketmq.errors import PreconditionFailedError
from pocketmq.testing import BrokerProcess

from ..integration.conftest import eventually
from .probes import own_status
from .test_failover import promote
from .test_group import caught_up, send_all, setup_topic, stored_bodies

pytestmark = pytest.mark.integration


def _records(log: bytes) -> list[int]:
    """The offsets of the records of a commit log (each starts with its total size)."""
    offsets, position = [], 0
    while position + 8 <= len(log):
        size = int.from_bytes(log[position : position + 4], "little")
        if size <= 0 or position + size > len(log):
            break
        offsets.append(position)
        position += size
    return offsets


def _damage_one_record(slave: BrokerProcess, number: int) -> None:
    """Flip a byte inside the body of the slave's record ``number`` (its broker stopped)."""
    [segment] = sorted((slave.data_dir / "data" / "store" / "commitlog").iterdir())
    data = bytearray(segment.read_bytes())
    offset = _records(bytes(data))[number]
    data[offset + 60] ^= 0x10
    segment.write_bytes(bytes(data))


def _repair(slave: BrokerProcess) -> str:
    command = [sys.executable, "-m", "pocketmq", "store", "repair"]
    command += ["--data-dir", str(slave.data_dir / "data")]
    config = slave.data_dir / "broker.toml"
    if config.exists():
        command += ["--config", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


async def _repaired_slave(make_group: Any) -> tuple[Any, list[bytes]]:
    """A sync group whose slave had every message, then a flipped byte and a repair (stopped)."""
    group = make_group("sync")
    master, slave = group.master, group.slaves[0]
    await setup_topic(master.address)
    bodies = [f"m{i}".encode() for i in range(300)]
    results = await send_all(group.namesrv.address, bodies)
    assert {r.status for r in results} == {SendStatus.OK}  # the slave had every one
    await caught_up(master, slave)
    slave.stop()
    _damage_one_record(slave, 150)
    with pytest.raises(RuntimeError, match="exited"):
        slave.restart()  # a damaged record it acknowledged: it refuses to start
    assert "set aside" in _repair(slave)
    return group, bodies


async def test_a_repaired_slave_copies_the_damaged_record_again_and_a_promotion_keeps_all(
    make_group: Any,
) -> None:
    group, bodies = await _repaired_slave(make_group)
    master, slave = group.master, group.slaves[0]
    slave.restart()
    await caught_up(master, slave)
    await eventually(lambda: _lacks_nothing(slave.address), timeout=20)
    master.kill()
    await promote(slave.address)  # no --force: it is in sync, and holds everything
    assert sorted(await stored_bodies(slave.address)) == sorted(bodies)


async def _lacks_nothing(address: str) -> bool:
    return not (await own_status(address)).get("missing")


async def test_a_slave_with_a_hole_is_refused_promotion_and_told_what_would_be_lost(
    make_group: Any,
) -> None:
    group, bodies = await _repaired_slave(make_group)
    master, slave = group.master, group.slaves[0]
    master.kill()  # the slave cannot copy the record again
    slave.restart()
    with pytest.raises(PreconditionFailedError, match=r"1 queued message\(s\).*T/") as refused:
        await promote(slave.address)
    assert "--force" in str(refused.value)
    await promote(slave.address, force=True)  # an operator's decision: that message is lost
    assert len(await stored_bodies(slave.address)) == len(bodies) - 1
