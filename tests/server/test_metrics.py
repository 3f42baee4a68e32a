"""``/metrics`` after a scripted workload: each series has the value the workload implies, read
with prometheus-client's own parser; and the health endpoints (docs/operations.md, "Metrics")."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer, SimpleConsumer
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, eventually

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, grpc_port=None, http_port=0) as process:
        yield process


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def scrape(broker: BrokerProcess) -> Samples:
    """Every sample on the page, by name and sorted labels."""
    status, text = await asyncio.to_thread(_get, f"http://{broker.http}/metrics")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_each_series_counts_exactly_what_the_workload_did(broker: BrokerProcess) -> None:
    address = broker.address
    async with Admin(servers=address) as admin:
        await admin.create_topic("orders", queues=2)
        await admin.create_topic("jobs", queues=1)
        await admin.create_group("billing", max_retries=1, retry_delays=[0.2])
        await admin.create_group("workers")
    body = b"x" * 100
    async with Producer(servers=address) as producer:
        for number in range(10):
            tag = "fail" if number < 2 else "ok"
            await producer.send(Message(topic="orders", body=body, tag=tag))
        jobs_from = time.time()
        for _ in range(5):
            await producer.send(Message(topic="jobs", body=b"job"))
        jobs_until = time.time()

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        failing = any(m.tag == "fail" for m in messages)
        return ConsumeStatus.RECONSUME_LATER if failing else ConsumeStatus.SUCCESS

    # billing: 8 succeed, 2 fail twice (first delivery and one retry) and are dead-lettered
    async with PushConsumer("billing", "orders", listener, servers=address):

        async def settled() -> bool:
            samples = await scrape(broker)
            return (
                value(samples, "pocketmq_dlq_messages", consumer_group="billing") == 2
                and value(
                    samples,
                    "rocketmq_consumer_lag_messages",
                    topic="orders",
                    consumer_group="billing",
                )
                == 0
            )

        await eventually(settled, timeout=30)
    # a FIFO group: A's first message in flight holds A's next two back; B has one message only
    async with Admin(servers=address) as admin:
        await admin.create_topic("lines", queues=1, topic_type="fifo")
        await admin.create_group("fifo-workers", fifo=True)
    async with Producer(servers=address) as producer:
        for key in ("A", "A", "A", "B"):
            await producer.send(Message(topic="lines", body=key.encode(), message_group=key))
    async with SimpleConsumer("fifo-workers", "lines", servers=address, await_duration=2) as fifo:
        first = await fifo.receive(max_messages=1, invisible_duration=60)
        then = await fifo.receive(max_messages=10, invisible_duration=60)
        assert [m.body for m in first] == [b"A"]
        assert [m.body for m in then] == [b"B"]  # A's next two wait behind the first
        blocked = await scrape(broker)
    assert (
        value(blocked, "pocketmq_fifo_blocked_message_groups", topic="lines",
              consumer_group="fifo-workers") == 1
    )  # fmt: skip
    # A's next two are ready but held back; A's first and B are in flight
    lines = {"topic": "lines", "consumer_group": "fifo-workers"}
    assert value(blocked, "rocketmq_consumer_ready_messages", **lines) == 2
    assert value(blocked, "rocketmq_consumer_inflight_messages", **lines) == 2
    assert 0 < value(blocked, "rocketmq_consumer_queueing_latency", **lines) < 60_000
    # workers: 5 popped, none acknowledged
    async with SimpleConsumer("workers", "jobs", servers=address, await_duration=2) as consumer:
        taken = []
        deadline = time.monotonic() + 10
        while len(taken) < 5 and time.monotonic() < deadline:
            taken += await consumer.receive(max_messages=5, invisible_duration=60)
        assert len(taken) == 5
        scraped_from = time.time()
        samples = await scrape(broker)
        scraped_until = time.time()

    normal = {"message_type": "normal", "is_retry": "false"}
    assert value(samples, "rocketmq_messages_in_total", topic="orders", **normal) == 10
    assert value(samples, "rocketmq_throughput_in_total", topic="orders", **normal) == 1000
    assert value(samples, "rocketmq_messages_in_total", topic="jobs", **normal) == 5
    fifo = {"message_type": "fifo", "is_retry": "false"}
    assert value(samples, "rocketmq_messages_in_total", topic="lines", **fifo) == 4
    assert (
        value(
            samples,
            "rocketmq_messages_out_total",
            topic="orders",
            consumer_group="billing",
            is_retry="false",
        )
        == 10
    )
    # the two failures came back once each through the retry topic
    retry = "%RETRY%billing"
    assert (
        value(samples, "rocketmq_messages_in_total", topic=retry, message_type="normal",
              is_retry="true") == 2
    )  # fmt: skip
    assert (
        value(
            samples,
            "rocketmq_messages_out_total",
            topic=retry,
            consumer_group="billing",
            is_retry="true",
        )
        == 2
    )
    assert (
        value(
            samples, "rocketmq_send_to_dlq_messages_total", topic="orders", consumer_group="billing"
        )
        == 2
    )
    assert value(samples, "pocketmq_dlq_messages", consumer_group="billing") == 2
    assert value(samples, "pocketmq_sent_back_total") == 2  # the retries; DLQ moves: above
    assert (
        value(
            samples, "rocketmq_consumer_inflight_messages", topic="jobs", consumer_group="workers"
        )
        == 5
    )
    assert (
        value(samples, "rocketmq_consumer_lag_messages", topic="jobs", consumer_group="workers")
        == 5
    )
    # every job was handed out: none is ready, none queueing, five still lagging
    jobs = {"topic": "jobs", "consumer_group": "workers"}
    assert value(samples, "rocketmq_consumer_ready_messages", **jobs) == 0
    assert value(samples, "rocketmq_consumer_queueing_latency", **jobs) == 0
    # the oldest job still unacknowledged waited from its send to the scrape
    waited = value(samples, "rocketmq_consumer_lag_latency", topic="jobs", consumer_group="workers")
    assert (
        (scraped_from - jobs_until) * 1000 - 5 <= waited <= (scraped_until - jobs_from) * 1000 + 5
    )
    assert (
        value(samples, "rocketmq_consumer_lag_latency", topic="orders", consumer_group="billing")
        == 0
    )
    assert value(samples, "rocketmq_half_messages") == 0
    # each failing message: RECONSUME_LATER on its first delivery and on its retry, then DLQ
    attempts = "pocketmq_delivery_attempts_total"
    assert value(samples, attempts, consumer_group="billing", outcome="success") == 8
    assert value(samples, attempts, consumer_group="billing", outcome="reconsume_later") == 4
    assert value(samples, attempts, consumer_group="billing", outcome="dlq") == 2
    assert (
        value(samples, "pocketmq_redeliveries_total", consumer_group="billing",
              outcome="reconsume_later") == 4
    )  # fmt: skip
    size = "rocketmq_message_size_bucket"
    assert value(samples, size, topic="orders", message_type="normal", le="1024.0") == 10
    assert value(samples, size, topic="orders", message_type="normal", le="+Inf") == 10
    assert (
        value(samples, "rocketmq_message_size_sum", topic="orders", message_type="normal") == 1000
    )
    latency = "rocketmq_rpc_latency_count"
    sends = {"protocol_type": "native", "request_code": "SEND", "response_code": "SUCCESS"}
    assert value(samples, latency, **sends) == 19  # orders 10, lines 4, jobs 5
    topics = {**sends, "request_code": "CREATE_TOPIC"}
    assert value(samples, latency, **topics) == 3
    assert value(samples, "rocketmq_rpc_latency_bucket", **sends, le="+Inf") == 19
    info = value(samples, "pocketmq_build_info", version=_version(samples), broker_name="broker-a",
                 broker_id="0", role="master")  # fmt: skip
    assert info == 1
    assert value(samples, "process_resident_memory_bytes") > 0


def _version(samples: Samples) -> str:
    for name, labels in samples:
        if name == "pocketmq_build_info":
            return dict(labels)["version"]
    raise AssertionError("no pocketmq_build_info")


async def test_health_and_readiness(broker: BrokerProcess) -> None:
    status, text = await asyncio.to_thread(_get, f"http://{broker.http}/healthz")
    assert (status, text) == (200, "ok\n")
    status, text = await asyncio.to_thread(_get, f"http://{broker.http}/readyz")
    assert (status, text) == (200, "ready: master\n")


@pytest.mark.integration
async def test_grpc_calls_and_clients_are_counted_with_their_language(tmp_path: Path) -> None:
    """The official Python client's sends land in rocketmq_rpc_latency (protocol grpc) and its
    session in rocketmq_producer_connections with language python; native ones say python too."""
    from rocketmq import ClientConfiguration, Credentials
    from rocketmq import Producer as OfficialProducer

    from ..grpc.conftest import message

    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, http_port=0) as broker:
        async with Admin(servers=broker.address) as admin:
            await admin.create_topic("watched", queues=1)

        def send_five() -> str:
            producer = OfficialProducer(ClientConfiguration(broker.grpc, Credentials()),
                                        ("watched",))  # fmt: skip
            producer.startup()
            try:
                for number in range(5):
                    producer.send(message("watched", b"%d" % number))
                return _get(f"http://{broker.http}/metrics")[1]  # while it is connected
            finally:
                producer.shutdown()

        during = await asyncio.to_thread(send_five)
        async with Producer(servers=broker.address) as native:
            await native.send(Message(topic="watched", body=b"native"))
            samples = await scrape(broker)
    sends = {"protocol_type": "grpc", "request_code": "SendMessage", "response_code": "OK"}
    assert value(samples, "rocketmq_rpc_latency_count", **sends) == 5
    assert value(samples, "rocketmq_rpc_latency_bucket", **sends, le="+Inf") == 5
    assert value(samples, "rocketmq_producer_connections", protocol="native",
                 language="python") == 1  # fmt: skip
    assert 'rocketmq_producer_connections{language="python",protocol="grpc"} 1.0' in during
