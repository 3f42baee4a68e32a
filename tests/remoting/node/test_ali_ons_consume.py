"""Issue 31, the consumer side, with a real remoting client: ali-ons push consumers against a
default ``pocketmq serve`` (its embedded name server, the broker's shared port) — heartbeats,
long-polling pulls, committed offsets, send-back into the retry topic and the DLQ, rebalancing,
broadcasting and tag filters (docs/remoting.md, "Broker, consumer side").

The messages are sent with pocketmq's own SDK over the native protocol: a message is the same
whichever protocol stores it or reads it (docs/semantics.md), so this is also the cross-protocol
test (native in, remoting out). Each runs against a default serve and one with
``--authentication``, where ali-ons signs every request (heartbeat bodies included).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pocketmq.client import Message
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.testing import BrokerProcess

from ...integration.conftest import unique
from ..conftest import ALICE, root_client
from .conftest import OnsDriver, ons_broker

pytestmark = pytest.mark.integration

OFFSET_MSG_ID = re.compile(r"^[0-9A-F]{32}$")


@dataclass
class Setup:
    driver: OnsDriver
    broker: BrokerProcess
    admin: SyncAdmin
    producer: SyncProducer
    keys: tuple[str, str] | None  # what the ali-ons clients sign with (authentication on)

    def topic(self, queues: int = 3) -> str:
        name = unique("ons-topic")
        self.admin.create_topic(name, queues=queues)
        return name

    def group(self, **options: Any) -> str:
        name = unique("ons-group")
        self.admin.create_group(name, **options)
        return name

    def consumer(self, group: str, topic: str, **options: Any) -> int:
        if self.keys is not None:
            options |= {"accessKey": self.keys[0], "secretKey": self.keys[1]}
        answer = self.driver.call(
            "consumer", nameSrv=self.broker.namesrv, group=group, topic=topic, **options
        )
        return int(answer["client"])

    def send(
        self, topic: str, body: str, tag: str | None = None, keys: tuple[str, ...] = ()
    ) -> str:
        result = self.producer.send(Message(topic=topic, body=body.encode(), tag=tag, keys=keys))
        return result.message_id

    def collect(
        self,
        client: int,
        until: Callable[[list[dict[str, Any]]], bool],
        timeout: float = 30.0,
        into: list[dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """What ``client`` received until ``until`` says enough (or the timeout)."""
        got = into if into is not None else []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got += self.driver.call("received", client=client)["messages"]
            if until(got):
                break
            time.sleep(0.1)
        return got


@pytest.fixture(scope="module", params=["default", "authentication"])
def ons(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    """A default ``pocketmq serve``, and one with ``--authentication`` whose ali-ons clients
    sign every request as alice (4.x ACL signature, heartbeat bodies included)."""
    authentication = request.param == "authentication"
    keys, sdk = (ALICE, root_client()) if authentication else (None, None)
    name = f"ons-consume-{request.param}"
    with (
        ons_broker(tmp_path_factory, name, authentication) as (broker, driver),
        SyncAdmin(servers=broker.address, client=sdk) as admin,
        SyncProducer(servers=broker.address, client=sdk) as producer,
    ):
        yield Setup(driver, broker, admin, producer, keys)


def test_a_push_consumer_receives_everything_once(ons: Setup) -> None:
    topic, group = ons.topic(), ons.group()
    before = {ons.send(topic, f"before-{n}", "TagA", (f"k{n}",)): n for n in range(4)}
    consumer = ons.consumer(group, topic)
    after = {ons.send(topic, f"after-{n}", "TagB", (f"k{n}", "x")): n for n in range(6)}
    got = ons.collect(consumer, lambda got: len(got) >= 10)
    time.sleep(0.5)
    got += ons.driver.call("received", client=consumer)["messages"]
    assert sorted(m["body"] for m in got) == sorted(
        [f"before-{n}" for n in range(4)] + [f"after-{n}" for n in range(6)]
    )
    by_id = {m["uniqKey"]: m for m in got}
    assert set(by_id) == set(before) | set(after)  # the SDK's message ids, each once
    for message_id, n in before.items():
        message = by_id[message_id]
        assert (message["tags"], message["keys"]) == ("TagA", f"k{n}")
    for message_id, n in after.items():
        assert (by_id[message_id]["tags"], by_id[message_id]["keys"]) == ("TagB", f"k{n} x")
    for message in got:
        assert message["topic"] == topic
        assert message["reconsumeTimes"] == 0
        assert OFFSET_MSG_ID.match(message["msgId"]), message["msgId"]
    assert ons.driver.call("errors", client=consumer)["errors"] == []
    ons.driver.call("close", client=consumer)


def test_a_failed_message_is_retried_then_dead_lettered(ons: Setup) -> None:
    topic, group = ons.topic(), ons.group()
    consumer = ons.consumer(group, topic, failTimes=100, maxReconsumeTimes=2)
    message_id = ons.send(topic, "always-fails", "TagA", ("order-1",))
    got = ons.collect(consumer, lambda got: len(got) >= 3)
    # delivered, then sent back twice through %RETRY%group (delay levels 3 and 4: the test
    # broker's levels are tenths of a second), each time as its own topic to the handler
    assert [m["reconsumeTimes"] for m in got] == [0, 1, 2]
    assert {(m["topic"], m["tags"], m["keys"], m["uniqKey"]) for m in got} == {
        (topic, "TagA", "order-1", message_id)
    }

    def dead() -> list[Any]:
        return ons.admin.run(lambda admin: admin.dead_letters(group))

    deadline = time.monotonic() + 20
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.2)
    [letter] = dead()
    assert letter.message.message_id == message_id
    assert letter.origin_topic == topic
    assert letter.message.body == b"always-fails"
    time.sleep(1.0)  # nothing more comes: the third failure went to the DLQ
    assert ons.driver.call("received", client=consumer)["messages"] == []
    history = ons.admin.run(lambda admin: admin.message_history(message_id))
    failures = [(a.attempt, a.outcome) for a in history if a.group == group]
    assert failures[:3] == [(1, "RECONSUME_LATER"), (2, "RECONSUME_LATER"), (3, "RECONSUME_LATER")]
    ons.driver.call("close", client=consumer)


def test_a_message_failing_once_is_redelivered_once(ons: Setup) -> None:
    topic, group = ons.topic(), ons.group()
    consumer = ons.consumer(group, topic, failTimes=1)
    ons.send(topic, "fails-once", "TagA")
    got = ons.collect(consumer, lambda got: len(got) >= 2)
    time.sleep(1.0)
    got += ons.driver.call("received", client=consumer)["messages"]
    assert [(m["body"], m["reconsumeTimes"], m["topic"]) for m in got] == [
        ("fails-once", 0, topic),
        ("fails-once", 1, topic),
    ]
    assert ons.admin.run(lambda admin: admin.dead_letters(group)) == []
    ons.driver.call("close", client=consumer)


def test_tag_filters(ons: Setup) -> None:
    topic, group = ons.topic(queues=1), ons.group()
    consumer = ons.consumer(group, topic, expression="TagA || TagB")
    for n, tag in enumerate(["TagA", "TagC", None, "TagB", "TagC", "TagC", "TagA"]):
        ons.send(topic, f"{n}-{tag}", tag)
    got = ons.collect(consumer, lambda got: len(got) >= 3)
    time.sleep(1.0)  # the filtered ones never come
    got += ons.driver.call("received", client=consumer)["messages"]
    assert [m["body"] for m in got] == ["0-TagA", "3-TagB", "6-TagA"]
    ons.send(topic, "7-TagB", "TagB")  # past the filtered tail: delivered at once
    assert [m["body"] for m in ons.collect(consumer, lambda got: len(got) >= 1)] == ["7-TagB"]
    ons.driver.call("close", client=consumer)


def test_two_consumers_of_a_group_share_the_queues(ons: Setup) -> None:
    topic, group = ons.topic(queues=4), ons.group()
    first = ons.consumer(group, topic, rebalanceInterval=500)
    second = ons.consumer(group, topic, rebalanceInterval=500)
    deadline = time.monotonic() + 20
    while True:  # both rebalanced: two queues each
        shares = [
            ons.driver.call("assigned", client=c, topic=topic)["queues"] for c in (first, second)
        ]
        if sorted(shares[0] + shares[1]) == [0, 1, 2, 3] and len(shares[0]) == 2:
            break
        assert time.monotonic() < deadline, shares
        time.sleep(0.1)
    bodies = [f"m{n}" for n in range(40)]
    for body in bodies:
        ons.send(topic, body)
    got: dict[int, list[dict[str, Any]]] = {first: [], second: []}
    deadline = time.monotonic() + 30
    while sum(len(m) for m in got.values()) < len(bodies) and time.monotonic() < deadline:
        for client in got:
            got[client] += ons.driver.call("received", client=client)["messages"]
        time.sleep(0.1)
    assert sorted(m["body"] for m in got[first] + got[second]) == sorted(bodies)
    queues = {client: {m["queueId"] for m in got[client]} for client in got}
    assert queues[first]
    assert queues[second]
    assert not queues[first] & queues[second]  # each queue has one owner
    for client in got:
        ons.driver.call("close", client=client)


def test_broadcasting_consumers_each_receive_everything(ons: Setup) -> None:
    topic, group = ons.topic(), ons.group(broadcast=True)
    consumers = [ons.consumer(group, topic, broadcast=True) for _ in range(2)]
    deadline = time.monotonic() + 20
    for consumer in consumers:  # each holds every queue, from its end (CONSUME_FROM_LAST_OFFSET)
        while ons.driver.call("assigned", client=consumer, topic=topic)["queues"] != [0, 1, 2]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    bodies = sorted(f"b{n}" for n in range(6))
    for body in bodies:
        ons.send(topic, body)
    for consumer in consumers:
        got = ons.collect(consumer, lambda got: len(got) >= len(bodies))
        assert sorted(m["body"] for m in got) == bodies
        ons.driver.call("close", client=consumer)


@pytest.mark.parametrize("broker_too", [False, True], ids=["consumer", "consumer-and-broker"])
def test_a_restarted_consumer_continues_from_its_committed_offsets(
    ons: Setup, broker_too: bool
) -> None:
    topic, group = ons.topic(), ons.group()
    consumer = ons.consumer(group, topic)
    for n in range(5):
        ons.send(topic, f"first-{n}")
    assert len(ons.collect(consumer, lambda got: len(got) >= 5)) == 5
    ons.driver.call("close", client=consumer)  # persists its offsets (UPDATE_CONSUMER_OFFSET)
    if broker_too:
        ons.broker.restart()  # same ports: the name server too
    for n in range(3):
        ons.send(topic, f"second-{n}")
    consumer = ons.consumer(group, topic)
    got = ons.collect(consumer, lambda got: len(got) >= 3)
    time.sleep(1.0)
    got += ons.driver.call("received", client=consumer)["messages"]
    assert sorted(m["body"] for m in got) == [f"second-{n}" for n in range(3)]
    ons.driver.call("close", client=consumer)
