"""A master is one only while it may write, wherever anyone looks (docs/replication.md §6, §9):
a broker restarted under a controller takes no write and claims no master role before etcd
confirmed it (issue 29 item 2); a frozen master is no master past its lease — not in its status,
not at the name server, not in /readyz (item 3); and a claim that the group has a newer master
makes a master step down only once it is verified (issue 28, finding 1)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from pocketmq.client import Admin
from pocketmq.client.connection import connect
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

from ..integration.conftest import eventually
from .conftest import FAST_CONTROLLER
from .probes import (
    ListingWatcher,
    Prober,
    own_status,
    register_rogue_master,
    role_of,
    wait_for_master,
)
from .test_controller import DirectWriter, _wait_in_sync
from .test_group import setup_topic

pytestmark = pytest.mark.integration


async def test_a_restarted_master_takes_no_write_and_is_no_master_before_etcd_confirms_it(
    etcd: Any, make_group: Any
) -> None:
    """Issue 29 item 2: the old master (--broker-id 0) restarted on its data after a failover.
    From the moment its port accepts connections, every send is refused, its status never says
    master, nor does the name server, nor its ready line; then it follows the new master."""
    group = make_group(
        "async", slaves=2, controller=etcd.url, server=FAST_CONTROLLER, grpc=True
    )  # gRPC: its start takes a while, with the native port already open
    master = group.master
    await setup_topic(master.address)
    await _wait_in_sync(master, 3)
    master.kill()
    successor = await wait_for_master([s.address for s in group.slaves], timeout=20)
    prober = Prober(master.address)
    watcher = ListingWatcher(group.namesrv.address, interval=0.02)
    prober.start()
    watcher.start()
    try:
        await asyncio.to_thread(master.restart)
        await eventually(lambda: _is(master.address, "slave"), timeout=30)
        await asyncio.sleep(0.3)
    finally:
        await prober.stop()
        listing = await watcher.stop()
    assert prober.connected, "the prober never reached the restarted broker"
    assert prober.roles, "the restarted broker never answered a status"
    assert master.role != "master", f"its ready line said role={master.role}"
    assert "master" not in prober.roles, f"its status said master: {prober.roles[:10]}"
    assert not prober.acked, f"it acknowledged {len(prober.acked)} send(s) it later discarded"
    assert not listing.listed_master_after(0, 0.0), "the name server listed it as master"
    assert listing.masters_at_once() <= 1
    assert await _is(successor, "master")


async def test_a_frozen_master_is_no_master_past_its_lease_anywhere(
    etcd: Any, make_group: Any
) -> None:
    """Issue 29 item 3 (and 5d): SIGSTOP the master until a slave is elected, then SIGCONT.
    The name server never lists two masters, nor the frozen one past its lease; the status and
    readiness requests that waited in its sockets through the freeze are answered "fenced",
    not "master"; it then steps down."""
    group = make_group("sync", slaves=2, controller=etcd.url, server=FAST_CONTROLLER, http=True)
    master = group.master
    await setup_topic(master.address)
    await _wait_in_sync(master, 3)
    watcher = ListingWatcher(group.namesrv.address)
    watcher.start()
    assert master.process is not None
    pid = master.process.pid
    waiting = await connect(master.address, "waiting", timeout=5.0)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        status_reply = asyncio.ensure_future(
            waiting.request(RequestCode.BROKER_STATUS, w.Empty(), w.BrokerStatusResponse, 60.0)
        )
        ready_reply = asyncio.ensure_future(asyncio.to_thread(_readyz, master.http))
        successor = await wait_for_master([s.address for s in group.slaves], timeout=20)
        await asyncio.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    answered = await status_reply
    ready = await ready_reply
    waiting.close()
    await eventually(lambda: _is(master.address, "slave"), timeout=20)
    listing = await watcher.stop()
    lease, margin = FAST_CONTROLLER["controller_lease"], FAST_CONTROLLER["controller_margin"]
    assert answered.replication["role"] != "master", answered.replication
    assert answered.replication["controller"]["state"] != "master"
    assert ready[0] != 200, ready
    assert listing.masters_at_once() == 1, "the name server listed two masters at once"
    late = listing.listed_master_after(0, stopped_at + lease - margin + 0.5)
    assert not late, f"frozen master listed as master {late[0] - stopped_at:.1f} s after SIGSTOP"
    assert await _is(successor, "master")


def _readyz(http: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{http}/readyz", timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("controlled", [False, True], ids=["no-controller", "controller"])
async def test_a_rogue_claim_of_a_newer_master_makes_no_master_step_down(
    make_group: Any, etcd: Any, controlled: bool
) -> None:
    """Issue 28 finding 1: a "broker" registers at the name server as the group's master with
    a higher epoch and a replication address nobody answers on. The real master hears the
    claim at its next registration and neither steps down nor cuts or quarantines its log: it
    keeps taking writes. (Under a controller only etcd decides; without one the claim is
    checked on the claimed master's replication port.)"""
    group = make_group("async", slaves=0, controller=etcd.url if controlled else None)
    master = group.master
    if controlled:
        await eventually(lambda: _is(master.address, "master"), timeout=20)
    await setup_topic(master.address)
    before = await own_status(master.address)
    epoch = int(str(before["epoch"]))
    rogue = await register_rogue_master(group.namesrv.address, epoch=epoch + 50)
    writer = DirectWriter(master.address, "w")
    writer.start()
    try:
        async with Admin(servers=master.address) as admin:  # a topic change: it registers
            spec = w.TopicSpec("T2", 1, "normal", 6)
            await admin._call(master.address, RequestCode.CREATE_TOPIC, spec, w.Empty)
        await asyncio.sleep(1.5)
        after = await own_status(master.address)
        acked_before = len(writer.acked)
        await eventually(lambda: len(writer.acked) > acked_before + 20, timeout=10)
    finally:
        await writer.stop()
        rogue.close()
    assert after["role"] == "master", after
    assert after["epoch"] == before["epoch"]
    assert int(str(after["log_end"])) >= int(str(before["log_end"]))
    quarantine = master.data_dir / "data" / "store" / "quarantine" / "ranges.jsonl"
    assert not quarantine.exists() or "divergent" not in quarantine.read_text()
    assert "demoted to slave" not in master.log()


async def _is(address: str, role: str) -> bool:
    return await role_of(address) == role
