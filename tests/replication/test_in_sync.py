"""The in-sync set follows acknowledgements (docs/replication.md §3, §8; issue 29 item 5b): a
slave that acknowledges nothing leaves it once ``ha_max_lag_time`` has passed — on the master
and in etcd's ``isr`` — however small its byte gap, and comes back once it has caught up. A slave
out of the set cannot be elected: a double fault (the up-to-date slave paused as the master
dies) stops the group until an in-sync member returns, instead of losing what it had."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from ..integration.conftest import eventually
from .conftest import FAST_CONTROLLER
from .probes import own_status, role_of, wait_for_master
from .test_controller import DirectWriter, _wait_in_sync
from .test_freeze import DEFAULT_CONTROLLER, TimedTraffic, _confirmed_all
from .test_group import setup_topic, stored_bodies

pytestmark = pytest.mark.integration

MAX_LAG = 2.0


async def _isr(master: Any) -> list[int]:
    """etcd's in-sync set as the master last wrote it (from its own status)."""
    controller = (await own_status(master.address))["controller"]
    return list(controller.get("isr", []))  # type: ignore[attr-defined]


async def test_a_silent_slave_leaves_the_in_sync_set_and_etcds_isr_within_the_time_bound(
    etcd: Any, make_group: Any
) -> None:
    group = make_group(
        "sync", slaves=2, controller=etcd.url, server=FAST_CONTROLLER, ha_max_lag_time=MAX_LAG
    )
    master, _, silent = group.members
    await setup_topic(master.address)
    await _wait_in_sync(master, 3)
    writer = DirectWriter(master.address, "w")
    writer.start()
    assert silent.process is not None
    try:
        await eventually(lambda: len(writer.acked) > 20, timeout=20)
        os.kill(silent.process.pid, signal.SIGSTOP)  # acknowledges nothing from now on
        paused = time.monotonic()
        try:
            await eventually(lambda: _isr_is(master, [0, 1]), timeout=MAX_LAG + 10)
            left = time.monotonic() - paused
            replication = await own_status(master.address)
        finally:
            os.kill(silent.process.pid, signal.SIGCONT)
        await eventually(lambda: _isr_is(master, [0, 1, 2]), timeout=20)  # caught up: back
    finally:
        await writer.stop()
    print(f"a silent slave left etcd's isr {left:.2f} s after it stopped (bound {MAX_LAG} s)")
    assert replication["in_sync"] == 1
    assert left < MAX_LAG + 1.5, f"left the in-sync set only after {left:.1f} s"


async def _isr_is(master: Any, members: list[int]) -> bool:
    return sorted(await _isr(master)) == members


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_double_fault_elects_no_lagging_slave_and_loses_nothing(
    etcd: Any, make_group: Any
) -> None:
    """The lagging slave is frozen until it is out of the in-sync set; then the up-to-date
    slave is frozen and the master killed at once, and the lagging one resumes: it is not
    elected (nobody is) until the up-to-date slave returns, which is; no message acknowledged
    OK is lost."""
    group = make_group("sync", slaves=2, controller=etcd.url, server=DEFAULT_CONTROLLER)
    master, current, lagging = group.members
    await setup_topic(master.address)
    await _wait_in_sync(master, 3)
    traffic = TimedTraffic(group.namesrv.address)
    traffic.start()
    assert current.process is not None
    assert lagging.process is not None
    try:
        await eventually(lambda: len(traffic.answers) > 50, timeout=20)
        os.kill(lagging.process.pid, signal.SIGSTOP)
        await eventually(lambda: _isr_is(master, [0, 1]), timeout=20)
        before = len(traffic.answers)
        await eventually(lambda: len(traffic.answers) > before + 200, timeout=20)
        os.kill(current.process.pid, signal.SIGSTOP)
        master.kill()
        os.kill(lagging.process.pid, signal.SIGCONT)
        await asyncio.sleep(6 + 1 + 4)  # a lease, the claim delay, and more
        roles = [await role_of(lagging.address)]
        os.kill(current.process.pid, signal.SIGCONT)
        elected = await wait_for_master([current.address, lagging.address], timeout=30)
        await eventually(lambda: _confirmed_all(elected), timeout=30)
    finally:
        for broker in (current, lagging):
            if broker.running:
                os.kill(broker.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        await traffic.stop()
    assert roles == ["slave"], "the lagging slave was elected"
    assert elected == current.address
    lost = traffic.confirmed() - set(await stored_bodies(elected))
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
