"""The proxy tier (docs/proxy.md): official clients through ``pocketmq proxy`` processes.

The whole gRPC suite also runs through ``serve --grpc-workers 2`` in CI
(``POCKETMQ_TEST_GRPC_WORKERS=2``, see conftest); these tests cover what only a proxy tier has:
worker processes sharing the port, a worker killed under a consumer, a stand-alone proxy in front
of a broker that routes its clients through itself, and check-backs reaching the right producer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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
from pocketmq.server.workers import metrics_port
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


def _ack_with_patience(consumer: Any, received: Any, patience: float = 30.0) -> None:
    """Ack as a user would after a dropped connection: retry a transport failure. The new
    workers may take seconds to listen on a loaded machine (5 s of retries once ran out at load
    5: "Connection refused"), so the retries are bounded by time, not by count."""
    deadline = time.monotonic() + patience
    while True:
        try:
            consumer.ack(received)
            return
        except Exception as exc:  # the channel to the killed worker may fail one call
            if "INVALID_RECEIPT_HANDLE" in str(exc) or "Code.INVALID" in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


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


# -- the workers' own metrics, and the Grafana dashboard (docs/operations.md) ---------------------

GRAFANA = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "pocketmq.json"
Scrape = dict[str, list[dict[str, str]]]  # sample name -> label sets of its samples


def _scrape(address: str) -> tuple[Scrape, set[str]]:
    """Every sample of ``http://address/metrics`` by name, and every family declared."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples: Scrape = {}
    declared = set()
    for family in text_string_to_metric_families(text):
        declared.add(family.name)
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return samples, declared


def _worker_rows(tier: BrokerProcess) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://{tier.http}/api/cluster", timeout=10) as answer:
        cluster = json.loads(answer.read())
    (row,) = [b for b in cluster["brokers"] if b["this"]]
    return list(row["figures"]["workers"])


def test_the_metrics_port_of_a_worker_follows_the_brokers() -> None:
    assert [metrics_port(5557, n) for n in range(3)] == [5558, 5559, 5560]
    assert metrics_port(0, 1) == 0  # the broker's on any free port: the workers' too
    assert metrics_port(None, 0) is None  # no HTTP on the broker: none on its workers


SENT_OK = "rocketmq_rpc_latency_count|protocol_type=grpc,request_code=SendMessage,response_code=OK"


def test_each_worker_serves_its_own_metrics_and_the_cluster_view_lists_them(
    tier: BrokerProcess, tier_admin: SyncAdmin
) -> None:
    topic, group = unique("topic"), unique("group")
    tier_admin.create_topic(topic, queues=2)
    tier_admin.create_group(group)
    clients = OfficialClients(tier.grpc)
    try:
        producer = clients.producer(topic)
        for i in range(30):
            producer.send(message(topic, f"m{i}".encode()))
        consumer = clients.simple(group, topic)
        for received in _receive(consumer, 30):
            consumer.ack(received)
        rows = _worker_rows(tier)
        assert sorted(r["number"] for r in rows) == [0, 1]
        assert all(r["running"] and r["pid"] in _workers(tier) for r in rows), rows
        addresses = [r["metrics_address"] for r in rows]
        assert len(set(addresses)) == 2
        assert all(a.startswith("127.0.0.1:") for a in addresses), addresses

        def figures() -> dict[str, float]:
            values: dict[str, float] = {}
            for address in addresses:
                with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
                    text = answer.read().decode()
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        labels = sample.labels
                        key = (
                            sample.name + "|" + ",".join(f"{k}={labels[k]}" for k in sorted(labels))
                        )
                        values[key] = values.get(key, 0.0) + sample.value
            return values

        def served() -> bool:
            found = figures()
            return (
                found.get(SENT_OK, 0) >= 30
                and found.get("pocketmq_proxy_batch_size_sum|kind=send", 0) >= 30
                and found.get("pocketmq_proxy_batch_size_sum|kind=ack", 0) >= 30
                and found.get("pocketmq_proxy_connections|kind=producer,language=python", 0) >= 1
                and found.get("pocketmq_proxy_connections|kind=consumer,language=python", 0) >= 1
            )

        wait_until(served, timeout=20)
        workers = {
            key.split("worker=")[1].split(",")[0]
            for key in figures()
            if key.startswith("pocketmq_proxy_info|")
        }
        assert workers == {"0", "1"}
    finally:
        clients.shutdown_all()
    # the cluster page links them
    with urllib.request.urlopen(f"http://{tier.http}/cluster", timeout=10) as answer:
        page = answer.read().decode()
    assert all(f'href="http://{a}/metrics"' in page for a in addresses)


_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                 "unless", "bool", "offset", "inf", "nan"}  # fmt: skip
# series a healthy test broker has no sample of (no FIFO group blocked, no refused credentials):
# their families must be declared all the same; their labels are docs/operations.md's
_EVENT_ONLY = {
    "pocketmq_fifo_blocked_message_groups": {"topic", "consumer_group"},
    "pocketmq_auth_failures_total": {"protocol", "reason"},
}


_CLAUSE = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"


def _queried(expr: str) -> tuple[set[str], dict[str, set[str]], set[str]]:
    """The metric names an expression reads, the label names each one's matchers use, and the
    labels it groups or joins by."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    grouped: set[str] = set()
    for clause in re.finditer(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text
    ):
        grouped |= {label.strip() for label in clause.group(1).split(",") if label.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    matchers: dict[str, set[str]] = {}
    for selector in re.finditer(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", text):
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector.group(2)))
        matchers.setdefault(selector.group(1), set()).update(labels)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    names = {
        word
        for word, call in re.findall(r"([a-zA-Z_:][\w:]*)\s*(\(?)", text)
        if not call and word.lower() not in _PROMQL_WORDS
    }
    return names, matchers, grouped


def test_every_series_the_grafana_dashboard_queries_is_served(
    tier: BrokerProcess, tier_admin: SyncAdmin
) -> None:
    """contrib/grafana/pocketmq.json against live scrapes: every metric a panel reads has
    samples at the broker (or, for proxy panels, at a worker), with every label the query
    matches on or groups by."""
    dashboard = json.loads(GRAFANA.read_text())
    topic, good, doomed = unique("topic"), unique("group"), unique("group")
    tier_admin.create_topic(topic, queues=2)
    tier_admin.create_group(good)
    tier_admin.create_group(doomed, max_retries=1)
    clients = OfficialClients(tier.grpc)
    try:
        producer = clients.producer(topic)
        for i in range(10):
            producer.send(message(topic, f"g{i}".encode()))
        consumer = clients.simple(good, topic)
        for received in _receive(consumer, 5):
            consumer.ack(received)  # the rest stay in flight
        failing = clients.simple(doomed, topic)
        # never acknowledged: redelivered once when invisible time passes, then dead-lettered
        wait_until(lambda: (bool(failing.receive(32, 1)) and False) or _dead(tier, doomed), 30)
        broker, broker_declared = _scrape(tier.http)
        worker_addresses = [r["metrics_address"] for r in _worker_rows(tier)]
        worker: Scrape = {}
        worker_declared: set[str] = set()
        for address in worker_addresses:
            samples, declared = _scrape(address)
            worker_declared |= declared
            for name, labels in samples.items():
                worker.setdefault(name, []).extend(labels)
    finally:
        clients.shutdown_all()
    checked = 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            proxies = "$proxy_job" in expr
            served, declared = (worker, worker_declared) if proxies else (broker, broker_declared)
            names, matchers, grouped = _queried(expr)
            assert names, expr
            carried: set[str] = set()
            for name in names:
                checked += 1
                family = re.sub(r"_(total|bucket|count|sum|info)$", "", name)
                if name in _EVENT_ONLY:
                    assert family in declared or name in declared, f"{name} not declared: {expr}"
                    carried |= _EVENT_ONLY[name]
                    continue
                assert served.get(name), f"{panel['title']}: no sample of {name}"
                labels = set().union(*(set(found) for found in served[name]))
                carried |= labels
                missing = matchers.get(name, set()) - labels - {"job"}
                assert not missing, f"{panel['title']}: {name} has no label {missing}"
            unknown = grouped - carried - {"le", "instance"}
            assert not unknown, f"{panel['title']}: grouped by {unknown}, which no series has"
    print(f"{checked} series of {len(dashboard['panels'])} panels checked")


def _neglect(consumer: Any) -> bool:
    """Receive for a second and acknowledge nothing; always true (for wait_until)."""
    consumer.receive(32, 1)
    return True


def _dead(tier: BrokerProcess, group: str) -> bool:
    samples, _ = _scrape(tier.http)
    return any(s.get("consumer_group") == group for s in samples.get("pocketmq_dlq_messages", []))
