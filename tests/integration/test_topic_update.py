"""Creating a topic that exists is idempotent only for the same settings; changing a topic is
``topic update``, which will not hide unconsumed messages without ``--force`` (issue 29 item 13:
``topic create`` shrank 8 queues to 2, hid 11 unconsumed messages, printed "created", and
``group status`` showed lag 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from pocketmq import Message
from pocketmq.client import Admin, Producer
from pocketmq.errors import PreconditionFailedError
from pocketmq.testing import BrokerProcess

pytestmark = pytest.mark.integration

SENT = 24  # three per queue of eight


def run(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POCKETMQ_SERVER": broker.address}
    return subprocess.run(
        [sys.executable, "-m", "pocketmq", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


async def _fill(broker: BrokerProcess, topic: str) -> None:
    async with Admin(servers=broker.address) as admin:
        assert await admin.create_topic(topic, queues=8) is True
    async with Producer(servers=broker.address) as producer:
        for number in range(SENT):
            await producer.send(Message(topic=topic, body=b"%d" % number))


async def _lag(broker: BrokerProcess, topic: str, group: str) -> dict[int, int]:
    async with Admin(servers=broker.address) as admin:
        return {q.queue_id: q.lag for q in await admin.queues(topic, group)}


async def test_create_refuses_other_settings_and_update_guards_unconsumed_messages(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group = names("t"), names("g")
    await _fill(broker, topic)
    assert run(broker, "group", "create", group).returncode == 0
    consumed = run(broker, "consume", topic, "--group", group, "--count", "5", "--json")
    assert consumed.returncode == 0, consumed.stderr
    lag = await _lag(broker, topic, group)
    assert sum(lag.values()) == SENT - 5
    hidden = sum(n for queue_id, n in lag.items() if queue_id >= 2)
    assert hidden > 0

    again = run(broker, "topic", "create", topic)  # the same settings: nothing to do
    assert again.returncode == 0, again.stderr
    assert f"topic {topic} exists already with 8 queues, type normal: unchanged" in again.stdout

    shrink = run(broker, "topic", "create", topic, "--queues", "2")
    assert shrink.returncode == 1
    assert shrink.stderr.strip() == (
        f"Error: PreconditionFailedError: topic {topic!r} exists with 8 queues, type normal, "
        f"perm rw; this asks for queues 8 -> 2: nothing was changed. To change it: `pocketmq "
        f"topic update {topic} --queues 2` (it refuses to drop queues holding unconsumed "
        "messages)"
    )
    assert await _lag(broker, topic, group) == lag  # nothing hidden, the lag still shows

    refused = run(broker, "topic", "update", topic, "--queues", "2")
    assert refused.returncode == 1
    assert (
        f"would hide queues 2-7 and {hidden} unconsumed message(s) (group {group}: {hidden})"
        in refused.stderr
    ), refused.stderr
    assert "--force" in refused.stderr
    assert await _lag(broker, topic, group) == lag

    forced = run(broker, "topic", "update", topic, "--queues", "2", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    [change] = [json.loads(line) for line in forced.stdout.splitlines()]
    assert change["before"]["queues"] == 8
    assert change["after"]["queues"] == 2
    assert change["dropped_queues"] == [2, 3, 4, 5, 6, 7]
    assert change["unconsumed"] == {group: hidden}
    assert len(await _lag(broker, topic, group)) == 2

    grown = run(broker, "topic", "update", topic, "--queues", "8")  # the hidden ones come back
    assert grown.returncode == 0, grown.stderr
    assert await _lag(broker, topic, group) == lag


async def test_a_topic_no_group_consumed_counts_every_stored_message(
    broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("t")
    await _fill(broker, topic)
    refused = run(broker, "topic", "update", topic, "--queues", "1")
    assert refused.returncode == 1
    assert "21 stored message(s), which no group has consumed" in refused.stderr
    async with Admin(servers=broker.address) as admin:
        with pytest.raises(PreconditionFailedError, match="21 stored message"):
            await admin.update_topic(topic, queues=1)
        [retyped] = await admin.update_topic(topic, topic_type="fifo")
        assert retyped.applied
        assert (retyped.before.topic_type, retyped.after.topic_type) == ("normal", "fifo")
        assert retyped.dropped_queues == ()
        [listed] = [t for t in await admin.list_topics() if t.name == topic]
        assert (listed.queues, listed.topic_type) == (8, "fifo")
        assert await admin.create_topic(topic, queues=8, topic_type="fifo") is False


def test_update_needs_something_to_change(broker: BrokerProcess) -> None:
    nothing = run(broker, "topic", "update", "whatever")
    assert nothing.returncode == 2
    assert "give at least one of --queues, --type, --perm" in nothing.stderr
