"""Apache RocketMQ's official Node.js client against the gRPC suite's ``pocketmq serve``.

The client (npm ``rocketmq-client-nodejs``, pinned in ``package.json``/``package-lock.json``
next to this file) is installed by ``scripts/prerequisites.sh`` (``make test`` runs it).
``driver.js`` runs it in one long-lived ``node`` process per test session and takes one JSON
command per line, so a test drives Node.js clients step by step, as the Python suite drives the
Python client. The session's broker is the one tests/grpc/conftest.py starts (short delay
levels, 0.5 s transaction checks).

Every test checks that the Node.js clients logged no warning or error the broker could have
avoided (``Message corrupted``, failed acks, ...), as the Python suite does for its client.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.testing import BrokerProcess

from ...nodejs import DriverError, LineDriver, require_npm_package
from ...scratch import scratch_dir

NODE_PROJECT = Path(__file__).parent

# Lines the Node.js client 1.0.8 logs whatever the broker does (regular expressions):
KNOWN_CLIENT_LOGS: tuple[str, ...] = ()


class NodeClientUnavailable(RuntimeError):
    """Raised under CI when Node.js or the official Node.js client is not installed."""


def require_node_client() -> Path:
    """The npm project holding the client; fail (CI) or skip (elsewhere) when it is missing."""
    return require_npm_package(
        NODE_PROJECT,
        "rocketmq-client-nodejs",
        "the official Node.js client",
        NodeClientUnavailable,
    )


class NodeClientError(DriverError):
    """A command the Node.js client refused: its exception's name, v2 code and message."""


class NodeDriver(LineDriver):
    """The ``node driver.js`` process (tests/nodejs.py); the client's default logger writes
    under $HOME/logs, which :class:`LineDriver` points at ``log_dir``."""

    error = NodeClientError

    def __init__(self, project: Path, log_dir: Path) -> None:
        super().__init__(project, log_dir, "node-driver.log")


class NodeClients:
    """One test's Node.js clients: starts them against the broker and shuts them down."""

    def __init__(self, driver: NodeDriver, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self._started: list[tuple[int, bool]] = []  # (client, is a push consumer)
        self._expected = [re.compile(p) for p in KNOWN_CLIENT_LOGS]

    def _start(self, op: str, push: bool = False, **fields: Any) -> int:
        client: int = self.driver.call(op, endpoints=self.endpoint, **fields)["client"]
        self._started.append((client, push))
        return client

    def producer(self, *topics: str, checker: str | None = None) -> int:
        """A started Producer; ``checker`` (COMMIT, ROLLBACK, UNSPECIFIED) answers checks."""
        return self._start("producer", topics=list(topics), checker=checker)

    def send(self, producer: int, topic: str, body: str, **fields: Any) -> dict[str, Any]:
        transaction = fields.pop("transaction", None)
        message = {"topic": topic, "body": body, **fields}
        result: dict[str, Any] = self.driver.call(
            "send", client=producer, message=message, transaction=transaction
        )
        return result

    def simple(self, group: str, topic: str, expression: str = "*", await_ms: int = 1000) -> int:
        return self._start(
            "simple", group=group, subscriptions={topic: expression}, awaitMs=await_ms
        )

    def receive(self, consumer: int, max_count: int = 16, invisible_ms: int = 15000) -> list[Any]:
        messages: list[Any] = self.driver.call(
            "receive", client=consumer, max=max_count, invisibleMs=invisible_ms
        )["messages"]
        return messages

    def push(self, group: str, topic: str, fail: dict[str, Any] | None = None) -> int:
        """A started PushConsumer; ``fail`` says which deliveries its listener fails
        (``{"all": True}``, or ``{"bodies": [...], "untilAttempt": n}``)."""
        return self._start("push", push=True, group=group, subscriptions={topic: "*"}, fail=fail)

    def deliveries(self, consumer: int) -> list[Any]:
        deliveries: list[Any] = self.driver.call("deliveries", client=consumer)["deliveries"]
        return deliveries

    def expect_logs(self, *patterns: str) -> None:
        """Log lines matching any of ``patterns`` are part of what the test provokes."""
        self._expected.extend(re.compile(p) for p in patterns)

    def unexpected_logs(self) -> list[str]:
        lines: list[str] = self.driver.call("logs")["lines"]
        return [line for line in lines if not any(p.search(line) for p in self._expected)]

    def shutdown_all(self) -> None:
        while self._started:
            client, push = self._started.pop()
            # a push consumer's shutdown waits for its long poll: let the driver finish it later
            self.driver.call("shutdown", client=client, background=push)


@pytest.fixture(scope="session")
def node_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeDriver]:
    project = require_node_client()
    with scratch_dir(tmp_path_factory, "node-client") as scratch:
        driver = NodeDriver(project, scratch)
        try:
            yield driver
        finally:
            driver.close()


@pytest.fixture
def node(node_driver: NodeDriver, broker: BrokerProcess) -> Iterator[NodeClients]:
    clients = NodeClients(node_driver, broker.grpc)
    node_driver.call("logs")  # start from a clean slate
    try:
        yield clients
    finally:
        clients.shutdown_all()
    unexpected = clients.unexpected_logs()
    assert not unexpected, "the Node.js client logged:\n" + "\n".join(unexpected)
