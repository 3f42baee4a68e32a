"""Issue 31, the name-server step, with a real remoting client: ali-ons producers and consumers
created with ``nameSrv`` pointing at a default ``pocketmq serve`` (its embedded name server, the
port a 4.x client's ``namesrvAddr=127.0.0.1:9876`` names) fetch a topic's route over remoting and
learn the broker address they will use — the broker's own port, which also speaks remoting.

What they then do at the broker is tested next door: sends in ``test_ali_ons_produce.py``,
consumption in ``test_ali_ons_consume.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pocketmq.client.sync import SyncAdmin
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.server.remoting.signatures import UNSIGNED_REMARK
from pocketmq.testing import BrokerProcess

from ..conftest import ALICE, root_client
from .conftest import OnsDriver, OnsError, ons_broker

pytestmark = pytest.mark.integration

TOPIC = "ons-orders"


@dataclass
class Ons:
    driver: OnsDriver
    broker: BrokerProcess
    keys: tuple[str, str] | None  # a user's keys when the broker has authentication

    def producer(self, keys: tuple[str, str] | None = None) -> int:
        fields = {"accessKey": keys[0], "secretKey": keys[1]} if keys else {}
        answer = self.driver.call("producer", nameSrv=self.broker.namesrv, group="PG", **fields)
        return int(answer["client"])

    def consumer(self, group: str, keys: tuple[str, str] | None = None) -> int:
        fields = {"accessKey": keys[0], "secretKey": keys[1]} if keys else {}
        answer = self.driver.call(
            "consumer", nameSrv=self.broker.namesrv, group=group, topic=TOPIC, **fields
        )
        return int(answer["client"])


@pytest.fixture(scope="module", params=["default", "authentication"])
def ons(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ons]:
    authentication = request.param == "authentication"
    keys = root_client() if authentication else None
    with ons_broker(tmp_path_factory, f"ons-{request.param}", authentication) as (broker, driver):
        with SyncAdmin(servers=broker.address, client=keys) as admin:
            admin.create_topic(TOPIC, queues=3)
        yield Ons(driver, broker, ALICE if authentication else None)


def test_a_producer_fetches_the_route_and_the_broker_address(ons: Ons) -> None:
    producer = ons.producer(ons.keys)
    route = ons.driver.call("route", client=producer, topic=TOPIC)
    assert route["queues"] == [{"brokerName": "broker-a", "queueId": n} for n in range(3)]
    # the broker it will send to: the broker's own port, shared by both protocols
    assert route["brokers"] == {"broker-a": ons.broker.address}
    assert route["routeData"]["brokerDatas"][0]["brokerAddrs"] == {"0": ons.broker.address}
    [queues] = route["routeData"]["queueDatas"]
    assert (queues["perm"], queues["readQueueNums"], queues["writeQueueNums"]) == (6, 3, 3)
    # and sends there (test_ali_ons_produce.py reads what it sent)
    answer = ons.driver.call("send", client=producer, topic=TOPIC, body="hello", tags="TagA")
    assert answer.get("sent", {}).get("sendStatus") == "SEND_OK", answer
    ons.driver.call("close", client=producer)


def test_a_consumer_learns_its_queues_and_meets_the_broker(ons: Ons) -> None:
    consumer = ons.consumer("CG-route", ons.keys)
    deadline = time.monotonic() + 15
    seen: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = ons.driver.call("subscription", client=consumer, topic=TOPIC)
        errors += ons.driver.call("errors", client=consumer)["errors"]
        if seen["queues"] and any(e["code"] == R.SUBSCRIPTION_GROUP_NOT_EXIST for e in errors):
            break
        time.sleep(0.2)
    assert seen["queues"] == [{"brokerName": "broker-a", "queueId": n} for n in range(3)]
    assert seen["brokers"] == {"broker-a": {"0": ons.broker.address}}
    # the broker serves its requests (tests/remoting/node/test_ali_ons_consume.py): this group
    # was never created, which pocketmq requires (docs/remoting.md, "Clients and groups");
    # nothing was refused for want of a signature
    refused = {e["code"] for e in errors}
    assert R.SUBSCRIPTION_GROUP_NOT_EXIST in refused, errors
    assert R.NO_PERMISSION not in refused, errors
    ons.driver.call("close", client=consumer)


def test_without_keys_or_with_a_wrong_secret_the_route_is_refused(ons: Ons) -> None:
    if ons.keys is None:
        pytest.skip("the default serve has no authentication: tested above without keys")
    for keys, remark in ((None, UNSIGNED_REMARK), ((ALICE[0], "wrong"), "do not match a user")):
        producer = ons.producer(keys)
        with pytest.raises(OnsError) as refused:
            ons.driver.call("route", client=producer, topic=TOPIC)
        assert refused.value.code == R.NO_PERMISSION
        assert remark in refused.value.message
        ons.driver.call("close", client=producer)
