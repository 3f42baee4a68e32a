"""What operators and applications are told while a group fails over (issue 29, 5d;
docs/replication.md §8): ``cluster list`` reports a broker that does not answer instead of
failing; a send while the group has no master raises the retriable NoMasterError, not "topic
not found"; a starting broker answers "starting", never flow control's TOO_MANY_REQUESTS."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from pocketmq import Message, errors
from pocketmq.client import Admin, Producer, ProducerConfig
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..integration.conftest import eventually
from .probes import Prober
from .test_group import setup_topic

pytestmark = pytest.mark.integration


async def test_cluster_list_reports_a_frozen_broker_as_unreachable(make_group: Any) -> None:
    group = make_group("async")
    slave = group.slaves[0]
    assert slave.process is not None
    os.kill(slave.process.pid, signal.SIGSTOP)
    try:
        command = [sys.executable, "-m", "pocketmq", "cluster", "list", "--json"]
        command += ["--server", group.namesrv.address]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60
        )
    finally:
        os.kill(slave.process.pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    rows = {row["address"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert rows[slave.address]["status"] == "unreachable"
    assert rows[slave.address]["role"] == "slave"  # as the name server lists it
    assert rows[group.master.address]["status"] == "ok"


async def test_a_send_while_the_group_has_no_master_raises_the_retriable_no_master_error(
    make_group: Any,
) -> None:
    group = make_group("async")
    await setup_topic(group.master.address)
    slave = group.slaves[0]
    await eventually(lambda: _routes_through(group.namesrv.address, slave.address), timeout=20)
    group.master.kill()  # no controller: nobody is promoted; the slave's queues are read-only
    config = ProducerConfig(send_timeout=1.0)
    async with Producer(servers=group.namesrv.address, config=config) as producer:
        with pytest.raises(errors.PocketMQError) as raised:
            await producer.send(Message(topic="T", body=b"x"))
    assert not isinstance(raised.value, errors.TopicNotFoundError), raised.value
    assert isinstance(raised.value, errors.NoMasterError)
    assert raised.value.retriable
    assert "no master" in str(raised.value)


async def test_a_starting_broker_answers_starting_not_too_many_requests(tmp_path: Any) -> None:
    """Sends from the moment the native port accepts (gRPC still starting, which blocks the
    event loop a few hundred ms): refused as "starting" or stored, never flow control."""
    broker = BrokerProcess(tmp_path / "b", grpc_port=0)
    try:
        await setup_topic(broker.address)
        broker.stop()
        prober = Prober(broker.address)
        prober.start()
        try:
            await asyncio.to_thread(broker.restart)
            await eventually(lambda: len(prober.acked) > 20, timeout=20)
        finally:
            await prober.stop()
    finally:
        broker.stop()
    assert prober.connected
    throttled = [r for r in prober.refusals if "flow control" in r or "530" in r]
    assert not throttled, throttled[:3]


async def _routes_through(namesrv: str, address: str) -> bool:
    """Whether the name server's route of T lists the broker at ``address``."""
    async with Admin(servers=namesrv) as admin:
        route = await admin._call(
            namesrv, RequestCode.GET_ROUTE, w.GetRouteRequest("T"), w.RouteResponse
        )
    return any(b.address == address for b in route.brokers)
