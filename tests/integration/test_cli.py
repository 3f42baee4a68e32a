"""The command line against a real broker: the docs/cli.md contract, run as a user would."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pocketmq import ConsumeStatus, MessageView
from pocketmq.client import PushConsumer
from pocketmq.testing import BrokerProcess

from .conftest import FAST_LEVELS

pytestmark = pytest.mark.integration


def run(
    broker: BrokerProcess, *args: str, input: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POCKETMQ_SERVER": broker.address}
    return subprocess.run(
        [sys.executable, "-m", "pocketmq", *args],
        capture_output=True,
        text=input is None,
        input=input,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_fifo_group_retries_on_the_brokers_delay_levels(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    """The FIFO retry schedule is the broker's rule (its delay levels from level 1), not a copy
    in the CLI: this broker's levels are tenths of a second."""
    group = names("g")
    created = run(broker, "group", "create", group, "--fifo")
    assert created.returncode == 0, created.stderr
    groups = [
        json.loads(line) for line in run(broker, "group", "list", "--json").stdout.splitlines()
    ]
    listed = next(g for g in groups if g["name"] == group)
    assert listed["fifo"] is True
    assert listed["retry_delays"] == FAST_LEVELS


def test_topic_group_send_consume_round_trip(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    assert run(broker, "topic", "create", topic, "--queues", "2").returncode == 0
    listed = run(broker, "topic", "list", "--json")
    assert {"name": topic, "queues": 2, "type": "normal", "perm": 6} in [
        json.loads(line) for line in listed.stdout.splitlines()
    ]
    assert (
        run(
            broker, "group", "create", group, "--max-retries", "3", "--retry-delays", "1s,2s,3s"
        ).returncode
        == 0
    )
    groups = [
        json.loads(line) for line in run(broker, "group", "list", "--json").stdout.splitlines()
    ]
    assert {"name": group, "max_retries": 3, "retry_delays": [1.0, 2.0, 3.0]}.items() <= next(
        g for g in groups if g["name"] == group
    ).items()
    sent = run(broker, "send", topic, "héllo", "--tag", "A", "--key", "k1", "--json")
    assert sent.returncode == 0, sent.stderr
    message_id = json.loads(sent.stdout)["message_id"]
    consumed = run(
        broker, "consume", topic, "--group", group, "--count", "1", "--timeout", "5s", "--json"
    )
    assert consumed.returncode == 0, consumed.stderr
    [record] = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert record["message_id"] == message_id
    assert record["body"] == "héllo"
    assert (record["tag"], record["keys"], record["delivery_attempt"]) == ("A", ["k1"], 1)
    expected = {
        "message_id",
        "topic",
        "queue_id",
        "queue_offset",
        "body",
        "tag",
        "keys",
        "message_group",
        "delivery_attempt",
        "born_timestamp",
        "store_timestamp",
    }
    assert expected <= set(record)
    again = run(broker, "consume", topic, "--group", group, "--timeout", "1s", "--json")
    assert again.stdout == ""  # acknowledged: not delivered again


def test_errors_go_to_stderr_with_a_non_zero_exit(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    missing = names("missing")
    result = run(broker, "send", missing, "x")
    assert result.returncode != 0
    assert "pocketmq topic create" in result.stderr
    assert result.stdout == ""
    bad = run(broker, "group", "create", names("g"), "--retry-delays", "soon")
    assert bad.returncode != 0
    assert "duration" in bad.stderr


def test_serve_prints_one_ready_line_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pocketmq",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--port",
            "0",
            "--grpc-port",
            "0",
            "--namesrv-port",
            "0",
            "--http-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert re.fullmatch(
            r"pocketmq ready native=127\.0\.0\.1:\d+ grpc=\S+ namesrv=127\.0\.0\.1:\d+"
            r" ha=127\.0\.0\.1:\d+ role=master http=127\.0\.0\.1:\d+\n",
            line,
        ), line
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert process.stdout.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_serve_refuses_a_port_in_use(broker: BrokerProcess, tmp_path: Path) -> None:
    port = broker.address.rsplit(":", 1)[1]
    command = [sys.executable, "-m", "pocketmq", "serve", "--data-dir", str(tmp_path / "d")]
    command += ["--port", port, "--grpc-port", "0", "--namesrv-port", "0", "--no-http"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0
    assert "cannot start" in result.stderr


async def test_operator_commands_status_query_and_delete(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    """`group status` shows the consumers and each queue's lag, `message query` finds by key,
    `group delete` refuses while consumers are connected unless --force, `topic delete` deletes."""
    topic, group = names("t"), names("g")
    assert run(broker, "topic", "create", topic, "--queues", "2").returncode == 0
    assert run(broker, "group", "create", group).returncode == 0
    for number in range(5):
        sent = run(broker, "send", topic, f"m{number}", "--key", f"order-{number % 2}")
        assert sent.returncode == 0, sent.stderr
    consumed = run(broker, "consume", topic, "--group", group, "--count", "3", "--json")
    assert consumed.returncode == 0, consumed.stderr
    rows = [
        json.loads(line)
        for line in run(
            broker, "group", "status", group, "--topic", topic, "--json"
        ).stdout.splitlines()
    ]
    assert len(rows) == 2
    assert sum(row["max_offset"] for row in rows) == 5
    assert sum(row["lag"] for row in rows) == 2  # five sent, three consumed and committed
    found = run(broker, "message", "query", "--topic", topic, "--key", "order-1", "--json")
    assert found.returncode == 0, found.stderr
    assert sorted(json.loads(line)["body"] for line in found.stdout.splitlines()) == ["m1", "m3"]
    missing = run(broker, "message", "query", "--topic", topic, "--key", "nope")
    assert missing.returncode == 1
    assert "no message" in missing.stderr

    listener_calls: list[int] = []

    def listener(messages: list[MessageView]) -> ConsumeStatus:
        listener_calls.append(len(messages))
        return ConsumeStatus.SUCCESS

    async with PushConsumer(group, topic, listener, servers=broker.address):
        refused = await asyncio.to_thread(run, broker, "group", "delete", group)
        assert refused.returncode == 1
        assert "connected consumer" in refused.stderr
        text = await asyncio.to_thread(run, broker, "group", "status", group)
        assert "1 consumer(s) connected" in text.stdout
        forced = await asyncio.to_thread(run, broker, "group", "delete", group, "--force")
        assert forced.returncode == 0, forced.stderr
    groups = [
        json.loads(line)["name"]
        for line in run(broker, "group", "list", "--json").stdout.splitlines()
    ]
    assert group not in groups
    assert run(broker, "topic", "delete", topic).returncode == 0
    topics = [
        json.loads(line)["name"]
        for line in run(broker, "topic", "list", "--json").stdout.splitlines()
    ]
    assert topic not in topics


def test_broker_stats_counts_what_was_sent_and_prints_a_table(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("t")
    assert run(broker, "topic", "create", topic, "--queues", "1").returncode == 0

    def stats() -> dict[str, object]:
        done = run(broker, "broker", "stats", "--json")
        assert done.returncode == 0, done.stderr
        [line] = done.stdout.splitlines()
        figures: dict[str, object] = json.loads(line)
        return figures

    before = stats()
    for body in ("a", "bb", "ccc"):
        assert run(broker, "send", topic, body).returncode == 0
    after = stats()
    assert after["messages stored"] == before["messages stored"] + 3  # type: ignore[operator]
    assert (after["role"], after["flush_mode"], after["address"]) == (
        "master",
        "async",
        broker.address,
    )
    table = run(broker, "broker", "stats")
    assert table.returncode == 0
    assert "messages stored" in table.stdout
    assert f"{after['messages stored']:,}" in table.stdout


async def test_dlq_list_and_resend_once_with_a_rate(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    assert run(broker, "topic", "create", topic, "--queues", "1").returncode == 0
    assert run(broker, "group", "create", group, "--max-retries", "0").returncode == 0
    for body in ("a", "b", "c"):
        assert run(broker, "send", topic, body, "--key", f"k-{body}").returncode == 0

    async def refuse(messages: list[MessageView]) -> ConsumeStatus:
        return ConsumeStatus.RECONSUME_LATER

    async with PushConsumer(group, topic, refuse, servers=broker.address):
        for _ in range(100):
            listed = await asyncio.to_thread(run, broker, "dlq", "list", group, "--json")
            if len(listed.stdout.splitlines()) == 3:
                break
            await asyncio.sleep(0.1)
    assert len(listed.stdout.splitlines()) == 3
    dry = await asyncio.to_thread(run, broker, "dlq", "resend", group, "--dry-run",
                                  "--filter", "key=k-b")  # fmt: skip
    assert dry.returncode == 0
    assert len(dry.stdout.splitlines()) == 1
    assert "1 message(s) match" in dry.stderr
    first = await asyncio.to_thread(run, broker, "dlq", "resend", group, "--rate", "50")
    assert first.returncode == 0, first.stderr
    assert len([line for line in first.stdout.splitlines() if line.startswith("resent ")]) == 3
    assert "resent 3, already resent before 0, failed 0" in first.stderr
    again = await asyncio.to_thread(run, broker, "dlq", "resend", group)
    assert "resent 0, already resent before 3, failed 0" in again.stderr


def test_cluster_list_shows_version_uptime_and_disk(broker: BrokerProcess) -> None:
    from pocketmq.version import VERSION

    done = run(broker, "cluster", "list", "--json")
    assert done.returncode == 0, done.stderr
    [row] = [json.loads(line) for line in done.stdout.splitlines()]
    assert row["version"] == VERSION
    assert row["uptime_seconds"] > 0
    assert 0 < row["disk_free_bytes"] <= row["disk_total_bytes"]
    table = run(broker, "cluster", "list").stdout.splitlines()
    assert table[0].split()[4:7] == ["VERSION", "UPTIME", "DISK_FREE"]
