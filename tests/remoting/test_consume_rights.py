"""The consumer side's requests on a broker with ``--authentication --authorization``: each is
checked against the ACL for the user who signed it, as a native consumer's would be
(docs/remoting.md, "Broker, consumer side"; docs/security.md, "Authorization"). Signed with the
4.x ACL signature (``AclClientRPCHook``) by :mod:`tests.remoting.raw`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pocketmq.client import Message
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.protocol.remoting import RequestCode as Q
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.stored import decode_stored
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_dir
from .conftest import ALICE, ROOT, create_users, pocketmq_cli, root_client
from .raw import Session
from .test_consume_frames import heartbeat, pull_fields

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_dir(tmp_path_factory, "remoting-rights") as root:
        data = root / "broker" / "data"
        create_users(data)
        pocketmq_cli("acl", "grant", ALICE[0], "Topic:orders", "--actions", "Sub", data=data)
        pocketmq_cli("acl", "grant", ALICE[0], "Group:billing", "--actions", "Sub", data=data)
        extra = ("--authentication", "--authorization")
        with BrokerProcess(
            root / "broker", config=FAST_BROKER, grpc_port=None, extra_args=extra
        ) as process:
            keys = root_client()
            with SyncAdmin(servers=process.address, client=keys) as admin:
                for topic in ("orders", "payroll"):
                    admin.create_topic(topic, queues=1)
                for group in ("billing", "hr"):
                    admin.create_group(group)
            with SyncProducer(servers=process.address, client=keys) as producer:
                producer.send(Message(topic="orders", body=b"order"))
                producer.send(Message(topic="payroll", body=b"salary"))
            yield process


def test_a_user_consumes_only_what_its_rules_allow(broker: BrokerProcess) -> None:
    alice = Session(broker.address, keys=ALICE)
    allowed = alice.call(Q.PULL_MESSAGE, pull_fields("billing", "orders", 0, 0))
    assert allowed.code == R.SUCCESS, allowed.remark
    assert [r.body for r in decode_stored(allowed.body)] == [b"order"]
    assert alice.call(Q.HEART_BEAT, body=heartbeat("a1", "billing", "orders")).code == R.SUCCESS
    listing = alice.call(Q.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "billing"})
    assert json.loads(listing.body) == {"consumerIdList": ["a1"]}
    for group, topic in (("billing", "payroll"), ("hr", "orders")):
        refused = alice.call(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 0))
        assert refused.code == R.NO_PERMISSION
        assert group in (refused.remark or "") or topic in (refused.remark or "")
    assert alice.call(Q.HEART_BEAT, body=heartbeat("a1", "hr", "orders")).code == R.NO_PERMISSION
    query = {"consumerGroup": "hr", "topic": "orders", "queueId": "0", "commitOffset": "1"}
    assert alice.call(Q.UPDATE_CONSUMER_OFFSET, query).code == R.NO_PERMISSION
    queue = {"topic": "payroll", "queueId": "0"}
    assert alice.call(Q.GET_MAX_OFFSET, queue).code == R.NO_PERMISSION
    # a super user may do anything
    root = Session(broker.address, keys=ROOT)
    assert root.call(Q.GET_MAX_OFFSET, queue).ext_fields["offset"] == "1"
    alice.close()
    root.close()
