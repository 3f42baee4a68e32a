"""The proxy tier (docs/proxy.md): official clients through ``pocketmq proxy`` processes.

The whole gRPC suite also runs through ``serve --grpc-workers 2`` in CI
(``POCKETMQ_TEST_GRPC_WORKERS=2``, see conftest); these tests cover what only a proxy tier has:
worker processes sharing the port, a worker killed under a consumer, a stand-alone proxy in front
of a broker that routes its clients through itself, and check-backs reaching the right producer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rocketmq import TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker
from .conftest import BROKER_CONFIG, OfficialClients, message, unique, wait_until


def _workers(broker: BrokerProcess) -> set[int]:
    assert broker.process is not None
    found = subprocess.run(
        ["pgrep", "-P", str(broker.process.pid), "-f", "pocketmq proxy"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {int(pid) for pid in found.stdout.split()}


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # workers ping every 0.5 s; one silent for 3 s is hung (the default is 30 s)
    config = {**BROKER_CONFIG, "server": {"grpc_workers": 2, "grpc_worker_silence": 3.0}}
    with scratch_broker(tmp_path_factory, "proxy-tier", config=config, http_port=0) as process:
        yield process


@pytest.fixture
def tier_admin(tier: BrokerProcess) -> Iterator[SyncAdmin]:
    with SyncAdmin(servers=tier.native) as admin:
        yield admin


def _receive(consumer: Any, count: int, invisible: int = 30) -> list[Any]:
    got: list[Any] = []
    wait_until(lambda: got.extend(consumer.receive(32, invisible)) or len(got) >= count, 15)
    return got


def test_workers_share_the_grpc_port_and_serve_the_official_clients(
    tier: BrokerProcess, tier_admin: SyncAdmin
) -> None:
    assert len(_workers(tier)) == 2
    topic, group = unique("topic"), unique("group")
    tier_admin.create_topic(topic, queues=4)
    tier_admin.create_group(group)
    clients = OfficialClients(tier.grpc)
    try:
        producer = clients.producer(topic)
        sent = {producer.send(message(topic, f"m{i}".encode())).message_id for i in range(60)}
        consumer = clients.simple(group, topic)
        got = _receive(consumer, 60)
        assert {m.message_id for m in got} == sent
        for m in got:
            assert not m.corrupted
            consumer.ack(m)
    finally:
        clients.shutdown_all()
    assert sum(q.committed_offset for q in tier_admin.queues(topic, group)) == 60


def _connections(tier: BrokerProcess) -> dict[tuple[str, str, str], float]:
    """rocketmq_{producer,consumer}_connections by (kind, protocol, language)."""
    with urllib.request.urlopen(f"http://{tier.http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("rocketmq_producer_connections", "rocketmq_consumer_connections"):
                key = (
                    sample.name.split("_")[1],
                    sample.labels["protocol"],
                    sample.labels["language"],
                )
                found[key] = sample.value
    return found


def test_the_broker_counts_the_official_clients_behind_its_workers(
    tier: BrokerProcess, tier_admin: SyncAdmin
) -> None:
    """Each proxy worker's one native connection carries its clients' heartbeats: the metrics
    count the official clients (protocol grpc), not the workers as native clients."""
    topic, group = unique("topic"), unique("group")
    tier_admin.create_topic(topic, queues=2)
    tier_admin.create_group(group)
    clients = OfficialClients(tier.grpc)
    try:
        producers = [clients.producer(topic) for _ in range(2)]
        for producer in producers:
            producer.send(message(topic, b"counted"))
        clients.simple(group, topic)
        wait_until(
            lambda: (
                _connections(tier).get(("producer", "grpc", "python")) == 2
                and _connections(tier).get(("consumer", "grpc", "python")) == 1
            ),
            timeout=20,
        )
        native = {key: n for key, n in _connections(tier).items() if key[1] == "native" and n}
        assert native == {}  # the workers' own connections are not clients
    finally:
        clients.shutdown_all()


def _ack_with_patience(consumer: Any, received: Any) -> None:
    """Ack as a user would after a dropped connection: retry a transport failure."""
    for _ in range(20):
        try:
            consumer.ack(received)
            return
        except Exception as exc:  # the channel to the killed worker may fail one call
            if "INVALID_RECEIPT_HANDLE" in str(exc) or "Code.INVALID" in str(exc):
                raise
            time.sleep(0.25)
    consumer.ack(received)


def test_receipts_survive_every_worker_being_killed(
    tier: BrokerProcess, tier_admin: SyncAdmin
) -> None:
    topic, group = unique("topic"), unique("group")
    tier_admin.create_topic(topic, queues=2)
    tier_admin.create_group(group)
    clients = OfficialClients(tier.grpc)
    try:
        producer = clients.producer(topic)
        for i in range(10):
            producer.send(message(topic, f"k{i}".encode()))
        consumer = clients.simple(group, topic)
        got = _receive(consumer, 10)
        before = _workers(tier)
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        # the broker starts new workers; a proxy holds no receipt, so the old handles work
        wait_until(lambda: len(_workers(tier) - before) == 2, timeout=30)
        for m in got:
            _ack_with_patience(consumer, m)
        assert consumer.receive(32, 30) == []  # nothing comes back: every ack counted
    finally:
        clients.shutdown_all()
    assert sum(q.committed_offset for q in tier_admin.queues(topic, group)) == 10


def test_a_hung_worker_is_killed_and_replaced(tier: BrokerProcess, tier_admin: SyncAdmin) -> None:
    """A worker whose loop stops (SIGSTOP: alive, but answering nobody) misses its pings: the
    broker kills it and starts another, and the official clients carry on."""
    before = _workers(tier)
    hung = min(before)
    os.kill(hung, signal.SIGSTOP)
    try:
        wait_until(lambda: hung not in _workers(tier) and len(_workers(tier)) == 2, timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hung, signal.SIGCONT)
    assert "silent for" in tier.log()
    topic = unique("topic")
    tier_admin.create_topic(topic, queues=1)
    clients = OfficialClients(tier.grpc)
    try:
        producer = clients.producer(topic)
        for i in range(5):  # whichever worker each connection lands on
            producer.send(message(topic, f"after-{i}".encode()))
    finally:
        clients.shutdown_all()


class _Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self, received: Any) -> Any:
        self.asked.append(received.message_id)
        return TransactionResolution.COMMIT


@pytest.fixture
def standalone(broker: BrokerProcess, tmp_path: Path) -> Iterator[str]:
    """A ``pocketmq proxy`` process in front of the suite's broker; its gRPC address."""
    log = (tmp_path / "proxy.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "pocketmq", "proxy", "--broker", broker.native, "--grpc-port", "0"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("pocketmq proxy ready grpc="), (tmp_path / "proxy.log").read_text()
        yield line.split("grpc=", 1)[1].split()[0]
    finally:
        process.terminate()
        assert process.wait(15) == 0
        process.stdout.close()  # type: ignore[union-attr]
        log.close()


def test_a_standalone_proxy_routes_its_clients_through_itself(
    standalone: str, broker: BrokerProcess, admin: SyncAdmin, topic: str
) -> None:
    channel = grpc.insecure_channel(standalone)
    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answer = stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)), timeout=5
        )
    finally:
        channel.close()
    assert answer.status.code == definition_pb2.Code.OK
    ports = {a.port for q in answer.message_queues for a in q.broker.endpoints.addresses}
    assert ports == {int(standalone.rsplit(":", 1)[1])}  # the proxy, not the broker's gRPC port
    assert int(broker.grpc.rsplit(":", 1)[1]) not in ports


def test_check_backs_through_a_proxy_reach_the_producer_of_that_topic(
    standalone: str, admin: SyncAdmin, client_log: Any
) -> None:
    first, second = unique("topic"), unique("topic")
    for name in (first, second):
        admin.create_topic(name, queues=2, topic_type="transaction")
    clients = OfficialClients(standalone)
    checkers = {first: _Checker(), second: _Checker()}
    try:
        sent: dict[str, str] = {}
        for name in (first, second):
            producer = clients.producer(name, checker=checkers[name])
            transaction = producer.begin_transaction()
            sent[name] = producer.send(message(name, b"open"), transaction).message_id
            # never committed: the broker asks the producer (through the proxy) after 0.5 s
        wait_until(lambda: all(c.asked for c in checkers.values()), timeout=20)
        for name in (first, second):
            assert set(checkers[name].asked) == {sent[name]}  # only its own message
    finally:
        clients.shutdown_all()
