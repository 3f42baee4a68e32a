"""What a newcomer meets in the first hour with the command line, against a real broker
(issue 29 item 16): a port that is not the native one, the retry topic in `group status`,
`broker status` for a person and for a program, tables in a pipe."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from pocketmq import ConsumeStatus, MessageView
from pocketmq.client import PushConsumer
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker
from .conftest import FAST_BROKER

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with every port a user has: native, gRPC and HTTP."""
    with scratch_broker(
        tmp_path_factory, "first-hour", config=FAST_BROKER, grpc_port=0, http_port=0
    ) as process:
        yield process


def run(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    """``pocketmq ARGS --server SERVER`` as a user runs it: output to pipes, no COLUMNS."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "POCKETMQ_SERVER")}
    return subprocess.run(
        [sys.executable, "-m", "pocketmq", *args, "--server", server],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_the_grpc_port_is_named_for_what_it_is(broker: BrokerProcess) -> None:
    answer = run("send", "t", "x", server=broker.grpc)
    assert answer.returncode == 1
    assert answer.stderr.strip().splitlines() == [
        f"Error: BrokerConnectionError: {broker.grpc} is not a pocketmq native port: it answered "
        "in HTTP/2, like a broker's gRPC port for the official RocketMQ clients (--grpc-port, "
        "8081) or etcd; use a broker's native port (--port, 10911) or a name server's (9876)"
    ]


def test_the_http_port_is_named_for_what_it_is(broker: BrokerProcess) -> None:
    answer = run("topic", "list", server=broker.http)
    assert answer.returncode == 1
    [line] = answer.stderr.strip().splitlines()
    assert f"{broker.http} is not a pocketmq native port: it answered in HTTP/1.x" in line
    assert "--http-port, 5557" in line
    assert "frame length" not in line


def test_a_server_without_a_port_exits_with_the_usage_code(broker: BrokerProcess) -> None:
    answer = run("topic", "list", server="127.0.0.1")
    assert answer.returncode == 2
    assert "'127.0.0.1' is not host:port" in answer.stderr


def test_group_status_lists_the_retry_topic_once(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    assert run("topic", "create", topic, "--queues", "2", server=broker.address).returncode == 0
    assert run("group", "create", group, server=broker.address).returncode == 0

    async def consume_a_moment() -> None:  # a push consumer commits its retry topic too
        async def handle(messages: list[MessageView]) -> ConsumeStatus:
            return ConsumeStatus.SUCCESS

        async with PushConsumer(group, topic, handle, servers=broker.address):
            await asyncio.sleep(1.5)

    asyncio.run(consume_a_moment())
    text = run("group", "status", group, server=broker.address)
    assert text.returncode == 0, text.stderr
    retry_lines = [line for line in text.stdout.splitlines() if line.startswith("%RETRY%")]
    assert len(retry_lines) == 1, text.stdout
    as_json = run("group", "status", group, "--json", server=broker.address)
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["topic"] for r in rows].count(f"%RETRY%{group}") == 1, rows
    assert sorted(r["topic"] for r in rows) == sorted([f"%RETRY%{group}", topic, topic])


def test_broker_status_is_indented_for_people_and_one_line_per_broker_with_json(
    broker: BrokerProcess,
) -> None:
    shown = run("broker", "status", server=broker.address)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("{\n  ")
    status = json.loads(shown.stdout)
    assert status["address"] == broker.address
    assert {"counters", "store", "replication"} <= status.keys()
    lines = run("broker", "status", "--json", server=broker.address).stdout.splitlines()
    assert len(lines) == 1
    one_line = json.loads(lines[0])  # the same report (free disk may move in between)
    assert one_line.keys() == status.keys()
    assert (one_line["broker"], one_line["address"]) == (status["broker"], status["address"])


def test_a_piped_table_keeps_each_row_on_one_line(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    long_name = names("a-topic-with-a-name-long-enough-to-pass-eighty-columns-" + "x" * 40)
    assert run("topic", "create", long_name, server=broker.address).returncode == 0
    listed = run("topic", "list", server=broker.address)
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if long_name in line]
    assert "normal" in row
    assert "rw" in row
