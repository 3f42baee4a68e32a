"""The official RocketMQ 5 Python client against a real ``pocketmq serve`` process.

One broker serves the whole gRPC suite (each test uses its own topics and groups); tests run the
official client from plain synchronous functions, as its users do: it runs its own threads and
event loop. Every client a test starts is shut down afterwards, and the suite checks that no
client thread outlives its test and that the client logged no error the broker could have
avoided (wrong encodings, missing fields, ...). The client logs to ``~/logs/rocketmq_python``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import service_pb2_grpc
from rocketmq.v5.client.connection import RpcClient

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker

MAX_MESSAGE_SIZE = 256 * 1024
# short delay levels: retries and delayed messages come back within seconds
BROKER_CONFIG: dict[str, dict[str, Any]] = {
    "broker": {
        "delay_levels": [1, 1, 1, 1, 1, 1],
        "transaction_timeout": 0.5,
        "transaction_check_interval": 0.5,
        # a loaded 2-core CI machine stalls the broker's loop >200 ms at times; refusing sends
        # then is flow control's job (tests/broker/test_flow_control.py), not these tests'
        "max_queue_wait": 5.0,
    },
    "store": {"max_message_size": MAX_MESSAGE_SIZE},
}

# Errors the official client 5.1.2 logs whatever the broker does (regular expressions):
KNOWN_CLIENT_ERRORS = (
    # the push consumer's Telemetry read loop dies on a None meter provider after the first
    # Settings reply (contract §1.4)
    r"'NoneType' object has no attribute 'get_meter'",
    # shutdown closes the channel under a push consumer's in-flight long poll: the cancelled
    # receive is logged (with an empty exception text) before the consumer marks itself stopped
    r"process received message error, $",
)

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


def wait_until(condition: Callable[[], bool], timeout: float = 10.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)


def message(topic: str, body: bytes, **fields: Any) -> Message:
    """An official-client ``Message`` (its setters validate, so build it step by step)."""
    out = Message()
    out.topic = topic
    out.body = body
    for name, value in fields.items():
        if name == "keys":
            out.keys = value
        elif name == "properties":
            for key, prop in value.items():
                out.add_property(key, prop)
        else:
            setattr(out, name, value)
    return out


# POCKETMQ_TEST_GRPC_WORKERS=N runs the whole suite through N proxy processes in front of the
# broker (`serve --grpc-workers N`, docs/proxy.md); tests/proxy runs a part of it so in CI
GRPC_WORKERS = int(os.environ.get("POCKETMQ_TEST_GRPC_WORKERS", "0"))


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = BROKER_CONFIG
    if GRPC_WORKERS:
        config = {**BROKER_CONFIG, "server": {"grpc_workers": GRPC_WORKERS}}
    with scratch_broker(tmp_path_factory, "grpc-broker", config=config) as process:
        yield process


@pytest.fixture(scope="session")
def admin(broker: BrokerProcess) -> Iterator[SyncAdmin]:
    client = SyncAdmin(servers=broker.native)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def topic(admin: SyncAdmin) -> str:
    name = unique("topic")
    admin.create_topic(name, queues=4)
    return name


@pytest.fixture
def group(admin: SyncAdmin) -> str:
    name = unique("group")
    admin.create_group(name, max_retries=2, retry_delays=[1, 1])
    return name


class CollectingListener(MessageListener):  # type: ignore[misc]
    """A push-consumer listener that records every delivery and fails where told to."""

    def __init__(self, fail: Callable[[Any], bool] = lambda m: False) -> None:
        self.fail = fail
        self.deliveries: list[tuple[float, Any]] = []
        self._lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self._lock:
            self.deliveries.append((time.monotonic(), message))
        return ConsumeResult.FAILURE if self.fail(message) else ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [m.body for _, m in self.deliveries]


class OfficialClients:
    """Starts official clients against the broker and shuts every one of them down."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._started: list[Any] = []

    def configuration(self) -> Any:
        return ClientConfiguration(self.endpoint, Credentials())

    def _start(self, client: Any) -> Any:
        self._started.append(client)
        # When a reply arrives before the client attached its callback (easy against a local
        # broker), the client opens its Telemetry stream from *this* thread, and grpc.aio then
        # needs this thread's current event loop: the client's own I/O loop, which its channel
        # creation sets as a side effect elsewhere. pytest-asyncio (and asyncio.run) leave the
        # main thread's loop explicitly unset, so set it as the client expects.
        asyncio.set_event_loop(RpcClient.get_channel_io_loop())
        client.startup()
        return client

    def producer(self, *topics: str, checker: Any = None) -> Any:
        return self._start(Producer(self.configuration(), topics or None, checker))

    def simple(self, group: str, topic: str, *, expression: str = "*", wait: int = 1) -> Any:
        return self._start(
            SimpleConsumer(self.configuration(), group, {topic: FilterExpression(expression)}, wait)
        )

    def push(self, group: str, topic: str, listener: MessageListener) -> Any:
        return self._start(
            PushConsumer(self.configuration(), group, listener, {topic: FilterExpression("*")})
        )

    def shutdown_all(self) -> None:
        if self._started:
            asyncio.set_event_loop(None)  # as pytest-asyncio leaves it after every test
        while self._started:
            client = self._started.pop()
            if client.is_running:
                client.shutdown()
            # 5.1.2 never shuts a consumer's decode pool down: do it so no thread outlives us
            decode_pool = getattr(client, "_Consumer__message_decode_executor", None)
            if decode_pool is not None:
                decode_pool.shutdown(wait=True)


class ClientLog(logging.Handler):
    """The official client's ERROR records during one test, minus known and expected ones."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[str] = []
        self._expected: list[re.Pattern[str]] = [re.compile(p) for p in KNOWN_CLIENT_ERRORS]

    def expect(self, *fragments: str) -> None:
        """Errors containing any of ``fragments`` are part of what the test provokes."""
        self._expected.extend(re.compile(re.escape(f)) for f in fragments)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if not any(pattern.search(text) for pattern in self._expected):
            self.errors.append(text)


def _client_threads() -> set[threading.Thread]:
    # The client's one process-wide I/O loop thread lives for the whole process by design, and
    # grpc's own poller of the raw stub's channel ("_poll_wrapper") winds down on its own time.
    return {
        t
        for t in threading.enumerate()
        if t.name != "channel_io_loop_thread" and "_poll_wrapper" not in t.name
    }


@pytest.fixture
def client_log() -> Iterator[ClientLog]:
    handler = ClientLog()
    logger = logging.getLogger("rocketmq-python-client")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def official(broker: BrokerProcess, client_log: ClientLog) -> Iterator[OfficialClients]:
    before = _client_threads()
    clients = OfficialClients(broker.grpc)
    try:
        yield clients
    finally:
        clients.shutdown_all()
    deadline = time.monotonic() + 5
    while (leaked := _client_threads() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leaked, f"client threads outlived the test: {sorted(t.name for t in leaked)}"
    assert not client_log.errors, "the official client logged errors:\n" + "\n".join(
        client_log.errors
    )


@pytest.fixture
def stub(broker: BrokerProcess) -> Iterator[Any]:
    """A raw v2 stub, for requests the official client refuses to send or never sends."""
    channel = grpc.insecure_channel(broker.grpc)
    try:
        yield service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()
