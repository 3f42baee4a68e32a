"""Issue 31, the broker's producer side with a real remoting client: an ali-ons producer
(npm ali-ons 3.12) against a default ``pocketmq serve``, with and without authentication, sends
messages with tags and keys; the pocketmq SDK then reads them with the body, tag, keys and id
ali-ons was told (docs/remoting.md, "Broker, producer side"; cross-protocol: docs/semantics.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pocketmq.client import ClientConfig
from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.protocol.remoting.msgid import decode_offset_msg_id
from pocketmq.testing import BrokerProcess

from ..conftest import ROOT, root_client
from .conftest import OnsDriver, ons_broker

pytestmark = pytest.mark.integration

TOPIC = "ons-produce"
GROUP = "sdk-readers"


@dataclass
class Deployment:
    driver: OnsDriver
    broker: BrokerProcess
    keys: ClientConfig | None


@pytest.fixture(scope="module", params=["default", "authentication"])
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    authentication = request.param == "authentication"
    keys = root_client() if authentication else None
    with ons_broker(tmp_path_factory, f"ons-produce-{request.param}", authentication) as (
        broker,
        driver,
    ):
        with SyncAdmin(servers=broker.address, client=keys) as admin:
            admin.create_topic(TOPIC, queues=3)
            admin.create_group(GROUP)
        yield Deployment(driver, broker, keys)


def test_ali_ons_sends_with_tags_and_keys_and_the_sdk_reads_them(deployment: Deployment) -> None:
    fields: dict[str, Any] = {"nameSrv": deployment.broker.namesrv, "group": "PG"}
    if deployment.keys is not None:
        fields |= {"accessKey": ROOT[0], "secretKey": ROOT[1]}
    producer = int(deployment.driver.call("producer", **fields)["client"])
    sent: dict[str, tuple[str, str]] = {}
    for n in range(6):
        body, tag, key = f"order {n}", f"Tag{n % 2}", f"order-{n}"
        answer = deployment.driver.call(
            "send", client=producer, topic=TOPIC, body=body, tags=tag, keys=[key]
        )
        assert answer.get("sent", {}).get("sendStatus") == "SEND_OK", answer
        # ali-ons reports the offsetMsgId the broker answered: where the message is stored
        where = decode_offset_msg_id(answer["sent"]["msgId"])
        assert f"{where.host}:{where.port}" == deployment.broker.address
        sent[body] = (tag, key)
    deployment.driver.call("close", client=producer)
    got: dict[str, Any] = {}
    with SyncSimpleConsumer(GROUP, TOPIC, servers=deployment.broker.address,
                            client=deployment.keys, await_duration=2.0) as consumer:  # fmt: skip
        for _ in range(10):
            for message in consumer.receive(32):
                got[message.body.decode()] = message
                consumer.ack(message)
            if len(got) >= len(sent):
                break
    assert {body: (m.tag, m.keys) for body, m in got.items()} == {
        body: (tag, (key,)) for body, (tag, key) in sent.items()
    }
    assert len({m.message_id for m in got.values()}) == len(sent)  # the broker gave each an id
    assert {m.queue_id for m in got.values()} == {0, 1, 2}  # ali-ons chose the queues


def test_what_ali_ons_sent_an_ali_ons_consumer_receives_by_tag(deployment: Deployment) -> None:
    """Both ends remoting: the consumer's tag filter sees the producer's tags, its message id is
    the ``offsetMsgId`` the producer was answered, and the keys travel."""
    topic, group = "ons-both-ends", "ons-both-ends-readers"
    with SyncAdmin(servers=deployment.broker.address, client=deployment.keys) as admin:
        admin.create_topic(topic, queues=2)
        admin.create_group(group)
    keys: dict[str, Any] = {}
    if deployment.keys is not None:
        keys = {"accessKey": ROOT[0], "secretKey": ROOT[1]}
    driver = deployment.driver
    producer = int(
        driver.call("producer", nameSrv=deployment.broker.namesrv, group="PG2", **keys)["client"]
    )
    ids = {}
    for n in range(4):
        tag = "TagX" if n % 2 == 0 else "TagY"
        answer = driver.call(
            "send", client=producer, topic=topic, body=f"both {n}", tags=tag, keys=[f"k{n}"]
        )
        ids[f"both {n}"] = answer["sent"]["msgId"]
    driver.call("close", client=producer)
    namesrv = deployment.broker.namesrv
    answer = driver.call(
        "consumer", nameSrv=namesrv, group=group, topic=topic, expression="TagX", **keys
    )
    consumer = int(answer["client"])
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        got += driver.call("received", client=consumer)["messages"]
        time.sleep(0.1)
    time.sleep(0.5)  # a TagY message would have arrived by now
    got += driver.call("received", client=consumer)["messages"]
    driver.call("close", client=consumer)
    assert sorted((m["body"], m["tags"], m["msgId"]) for m in got) == [
        ("both 0", "TagX", ids["both 0"]),
        ("both 2", "TagX", ids["both 2"]),
    ]
    assert sorted(str(m["keys"]) for m in got) == ["k0", "k2"]


def test_an_ali_ons_delay_level_holds_the_message_back(deployment: Deployment) -> None:
    """``delayTimeLevel`` (the DELAY property) is the broker's delay level: level 10 is 1 s with
    the test broker's levels (0.1 s steps), while a plain message sent after it comes at once."""
    fields: dict[str, Any] = {"nameSrv": deployment.broker.namesrv, "group": "PG-delay"}
    if deployment.keys is not None:
        fields |= {"accessKey": ROOT[0], "secretKey": ROOT[1]}
    producer = int(deployment.driver.call("producer", **fields)["client"])
    with SyncAdmin(servers=deployment.broker.address, client=deployment.keys) as admin:
        admin.create_topic("ons-delay", queues=2)  # its own topic: other tests' messages stay out
        admin.create_group("delay-readers")
    sent_at = time.monotonic()
    for body, level in (("later", 10), ("now", 0)):
        answer = deployment.driver.call(
            "send", client=producer, topic="ons-delay", body=body, tags="D", delayLevel=level
        )
        assert answer.get("sent", {}).get("sendStatus") == "SEND_OK", answer
    deployment.driver.call("close", client=producer)
    arrived: dict[str, float] = {}
    with SyncSimpleConsumer("delay-readers", "ons-delay", servers=deployment.broker.address,
                            client=deployment.keys, await_duration=0.5) as consumer:  # fmt: skip
        deadline = time.monotonic() + 15
        while len(arrived) < 2 and time.monotonic() < deadline:
            for message in consumer.receive(32):
                arrived.setdefault(message.body.decode(), time.monotonic() - sent_at)
                consumer.ack(message)
    assert set(arrived) == {"later", "now"}
    assert arrived["later"] >= 0.9, arrived  # held for its level
    assert arrived["now"] < arrived["later"], arrived
