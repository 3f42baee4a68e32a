"""Issue 31, the consumer side, with a real remoting client: ali-ons push consumers against a
default ``pocketmq serve`` (its embedded name server, the broker's shared port) — heartbeats,
long-polling pulls, committed offsets, send-back into the retry topic and the DLQ, rebalancing,
broadcasting and tag filters (docs/remoting.md, "Broker, consumer side").

The messages are sent with pocketmq's own SDK over the native protocol: a message is the same
whichever protocol stores it or reads it (docs/semantics.md), so this is also the cross-protocol
test (native in, remoting out).
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

from ...integration.conftest import FAST_BROKER, unique
from ...scratch import scratch_dir
from .conftest import OnsDriver, require_ali_ons

pytestmark = pytest.mark.integration

OFFSET_MSG_ID = re.compile(r"^[0-9A-F]{32}$")


@dataclass
class Setup:
    driver: OnsDriver
    broker: BrokerProcess
    admin: SyncAdmin
    producer: SyncProducer

    def topic(self, queues: int = 3) -> str:
        name = unique("ons-topic")
        self.admin.create_topic(name, queues=queues)
        return name

    def group(self, **options: Any) -> str:
        name = unique("ons-group")
        self.admin.create_group(name, **options)
        return name

    def consumer(self, group: str, topic: str, **options: Any) -> int:
        answer = self.driver.call(
            "consumer", nameSrv=self.broker.namesrv, group=group, topic=topic, **options
        )
        return int(answer["client"])

    def send(self, topic: str, body: str, tag: str | None = None, keys: tuple[str, ...] = ()) -> str:
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


@pytest.fixture(scope="module")
def ons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    require_ali_ons()
    with scratch_dir(tmp_path_factory, "ons-consume") as root:
        with BrokerProcess(root / "broker", config=FAST_BROKER, grpc_port=None) as broker:
            with SyncAdmin(servers=broker.address) as admin, SyncProducer(
                servers=broker.address
            ) as producer:
                driver = OnsDriver(root)
                try:
                    yield Setup(driver, broker, admin, producer)
                finally:
                    driver.close()


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
