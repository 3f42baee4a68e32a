"""The broker's consumer-side remoting requests frame by frame (docs/remoting.md, "Broker,
consumer side"), for what ali-ons does not exercise or a test cannot see through it: long
polls and their wake-up, pipelining behind a suspended pull, the pull codes, the broker's
``NOTIFY_CONSUMER_IDS_CHANGED``, orderly consumers' locks, send-back to the DLQ, offsets.

The requests follow apache/rocketmq's headers and bodies (commit 8fc57f1468, 5.3.3):
``PullMessageRequestHeader`` / ``PullMessageResponseHeader`` and ``PullSysFlag`` (bit 0 commit
offset, 1 suspend, 2 subscription), ``HeartbeatData``/``ConsumerData``/``SubscriptionData``,
``GetConsumerListByGroupRequestHeader``, ``NotifyConsumerIdsChangedRequestHeader`` (sent by
``Broker2Client.notifyConsumerIdsChanged``), ``LockBatchRequestBody``/``LockBatchResponseBody``
and ``UnlockBatchRequestBody``, ``ConsumerSendMsgBackRequestHeader``,
``QueryConsumerOffsetRequestHeader``, ``UpdateConsumerOffsetRequestHeader``,
``GetMaxOffsetRequestHeader``, ``GetMinOffsetRequestHeader``, ``SearchOffsetRequestHeader``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq.client import Message
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.protocol.remoting import RequestCode as Q
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.stored import decode_stored
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, unique
from ..scratch import scratch_dir
from .raw import Session, ask

pytestmark = pytest.mark.integration

PULL_FIELDS = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")


class Env:
    def __init__(self, broker: BrokerProcess, admin: SyncAdmin, producer: SyncProducer) -> None:
        self.broker, self.admin, self.producer = broker, admin, producer

    def topic_and_group(self, queues: int = 2) -> tuple[str, str]:
        topic, group = unique("frames-topic"), unique("frames-group")
        self.admin.create_topic(topic, queues=queues)
        self.admin.create_group(group)
        return topic, group

    def send(self, topic: str, body: str, tag: str | None = None) -> str:
        return self.producer.send(Message(topic=topic, body=body.encode(), tag=tag)).message_id

    def session(self) -> Session:
        return Session(self.broker.address)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with (
        scratch_dir(tmp_path_factory, "remoting-frames") as root,
        BrokerProcess(root / "broker", config=FAST_BROKER, grpc_port=None) as broker,
        SyncAdmin(servers=broker.address) as admin,
        SyncProducer(servers=broker.address) as producer,
    ):
        yield Env(broker, admin, producer)


def pull_fields(group: str, topic: str, queue: int, offset: int, **extra: Any) -> dict[str, str]:
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(2 | 4),  # suspend, subscription given
        "commitOffset": "0",
        "suspendTimeoutMillis": "5000",
        "subscription": "*",
        "subVersion": "0",
    }
    return fields | {name: str(value) for name, value in extra.items()}


def heartbeat(client_id: str, group: str, topic: str, model: str = "CLUSTERING") -> bytes:
    return json.dumps(
        {
            "clientID": client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": model,
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": topic, "subString": "*", "tagsSet": [], "codeSet": []}
                    ],
                    "unitMode": False,
                }
            ],
        }
    ).encode()


def test_a_suspended_pull_is_woken_by_a_new_message(env: Env) -> None:
    topic, group = env.topic_and_group(queues=1)
    session = env.session()
    started = time.monotonic()
    pull = session.send(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 0))
    # a request behind the suspended pull is answered at once (pipelining: opaque order)
    maximum = session.call(Q.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
    assert (maximum.code, maximum.ext_fields["offset"]) == (R.SUCCESS, "0")
    assert pull not in session.answers
    time.sleep(0.5)
    message_id = env.send(topic, "wake-up", "TagA")
    answer = session.answer(pull)
    waited = time.monotonic() - started
    assert answer.code == R.SUCCESS
    assert 0.4 < waited < 4.5
    assert set(PULL_FIELDS) <= set(answer.ext_fields)
    assert answer.ext_fields["nextBeginOffset"] == "1"
    assert answer.ext_fields["suggestWhichBrokerId"] == "0"
    [record] = decode_stored(answer.body)
    assert (record.topic, record.body, record.queue_offset) == (topic, b"wake-up", 0)
    assert record.properties["UNIQ_KEY"] == message_id
    assert record.properties["TAGS"] == "TagA"
    assert record.store_host == env.broker.address
    assert record.reconsume_times == 0
    session.close()


def test_pull_codes(env: Env) -> None:
    topic, group = env.topic_and_group(queues=1)
    session = env.session()
    # nothing yet, no suspend flag: PULL_NOT_FOUND at once, the four fields all there
    quick = session.call(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 0, sysFlag=4))
    assert quick.code == R.PULL_NOT_FOUND
    assert {name: quick.ext_fields[name] for name in PULL_FIELDS} == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "0",
        "minOffset": "0",
        "maxOffset": "0",
    }
    # a suspended pull that nothing wakes ends at its timeout
    started = time.monotonic()
    timed = session.call(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 0, suspendTimeoutMillis=300))
    assert timed.code == R.PULL_NOT_FOUND
    assert time.monotonic() - started >= 0.25
    for n in range(3):
        env.send(topic, f"m{n}", "TagB")
    # nothing matches the tags: PULL_RETRY_IMMEDIATELY, continue past what was looked at
    unmatched = session.call(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 0, subscription="TagA"))
    assert unmatched.code == R.PULL_RETRY_IMMEDIATELY
    assert int(unmatched.ext_fields["nextBeginOffset"]) == 3
    # an offset past the queue's end: PULL_OFFSET_MOVED, with where to go on
    moved = session.call(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 50))
    assert moved.code == R.PULL_OFFSET_MOVED
    assert moved.ext_fields["maxOffset"] == "3"
    # a missing header field: SYSTEM_ERROR naming it
    fields = pull_fields(group, topic, 0, 0)
    del fields["queueOffset"]
    broken = session.call(Q.PULL_MESSAGE, fields)
    assert broken.code == R.SYSTEM_ERROR
    assert "queueOffset" in (broken.remark or "")
    session.close()


def test_a_pull_commits_the_offset_it_carries(env: Env) -> None:
    topic, group = env.topic_and_group(queues=1)
    for n in range(4):
        env.send(topic, f"m{n}")
    session = env.session()
    fields = pull_fields(group, topic, 0, 2, sysFlag=1 | 4, commitOffset=2)
    answer = session.call(Q.PULL_MESSAGE, fields)
    assert [r.body for r in decode_stored(answer.body)] == [b"m2", b"m3"]
    query = {"consumerGroup": group, "topic": topic, "queueId": "0"}
    assert session.call(Q.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "2"
    session.send(Q.UPDATE_CONSUMER_OFFSET, query | {"commitOffset": "4"}, oneway=True)
    deadline = time.monotonic() + 5
    while session.call(Q.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] != "4":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    session.close()


def test_offsets_of_a_queue(env: Env) -> None:
    topic, _group = env.topic_and_group(queues=1)
    env.send(topic, "early")
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    env.send(topic, "late")
    session = env.session()
    queue = {"topic": topic, "queueId": "0"}
    assert session.call(Q.GET_MIN_OFFSET, queue).ext_fields["offset"] == "0"
    assert session.call(Q.GET_MAX_OFFSET, queue).ext_fields["offset"] == "2"
    found = session.call(Q.SEARCH_OFFSET_BY_TIMESTAMP, queue | {"timestamp": str(middle)})
    assert found.ext_fields["offset"] == "1"
    earliest = session.call(Q.GET_EARLIEST_MSG_STORETIME, queue)
    assert 0 < int(earliest.ext_fields["timestamp"]) < middle
    nowhere = session.call(Q.GET_MAX_OFFSET, {"topic": topic, "queueId": "7"})
    assert nowhere.code != R.SUCCESS
    session.close()


def test_membership_changes_are_pushed_to_the_group(env: Env) -> None:
    topic, group = env.topic_and_group()
    first, second = env.session(), env.session()
    assert first.call(Q.HEART_BEAT, body=heartbeat("client-1", group, topic)).code == R.SUCCESS
    listing = first.call(Q.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    assert json.loads(listing.body) == {"consumerIdList": ["client-1"]}
    assert second.call(Q.HEART_BEAT, body=heartbeat("client-2", group, topic)).code == R.SUCCESS
    notice = first.wait_push(Q.NOTIFY_CONSUMER_IDS_CHANGED)
    assert notice.is_oneway
    assert notice.ext_fields == {"consumerGroup": group}
    listing = first.call(Q.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    assert json.loads(listing.body)["consumerIdList"] == ["client-1", "client-2"]
    second.close()  # its connection's close takes its registration with it
    first.wait_push(Q.NOTIFY_CONSUMER_IDS_CHANGED)
    listing = first.call(Q.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    assert json.loads(listing.body)["consumerIdList"] == ["client-1"]
    gone = first.call(Q.UNREGISTER_CLIENT, {"clientID": "client-1", "consumerGroup": group})
    assert gone.code == R.SUCCESS
    listing = first.call(Q.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    assert json.loads(listing.body)["consumerIdList"] == []
    # a group that does not exist is refused (pocketmq requires groups to be created)
    refused = first.call(Q.HEART_BEAT, body=heartbeat("client-1", "no-such-group", topic))
    assert refused.code == R.SUBSCRIPTION_GROUP_NOT_EXIST
    first.close()


def lock_body(group: str, client_id: str, topic: str, queues: list[int]) -> bytes:
    return json.dumps(
        {
            "consumerGroup": group,
            "clientId": client_id,
            "mqSet": [{"topic": topic, "brokerName": "broker-a", "queueId": q} for q in queues],
            "onlyThisBroker": False,
        }
    ).encode()


def locked(answer: Any) -> list[int]:
    assert answer.code == R.SUCCESS, answer.remark
    return sorted(q["queueId"] for q in json.loads(answer.body)["lockOKMQSet"])


def test_orderly_consumers_lock_queues(env: Env) -> None:
    topic, group = env.topic_and_group(queues=2)
    a, b = env.session(), env.session()
    a.call(Q.HEART_BEAT, body=heartbeat("client-a", group, topic))
    b.call(Q.HEART_BEAT, body=heartbeat("client-b", group, topic))
    a_asks = lock_body(group, "client-a", topic, [0, 1])
    b_asks = lock_body(group, "client-b", topic, [0, 1])
    assert locked(a.call(Q.LOCK_BATCH_MQ, body=a_asks)) == [0, 1]
    assert locked(b.call(Q.LOCK_BATCH_MQ, body=b_asks)) == []
    a.call(Q.UNLOCK_BATCH_MQ, body=lock_body(group, "client-a", topic, [0]))
    assert locked(b.call(Q.LOCK_BATCH_MQ, body=b_asks)) == [0]
    a.close()  # its locks go with its connection
    deadline = time.monotonic() + 5
    while locked(b.call(Q.LOCK_BATCH_MQ, body=b_asks)) != [0, 1]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    b.close()


def test_send_back_with_a_negative_delay_level_dead_letters(env: Env) -> None:
    topic, group = env.topic_and_group(queues=1)
    message_id = env.send(topic, "poison")
    session = env.session()
    [record] = decode_stored(session.call(Q.PULL_MESSAGE, pull_fields(group, topic, 0, 0)).body)
    back = {
        "offset": str(record.commit_log_offset),
        "group": group,
        "delayLevel": "-1",
        "originMsgId": message_id,
        "originTopic": topic,
        "unitMode": "false",
        "maxReconsumeTimes": "16",
    }
    assert session.call(Q.CONSUMER_SEND_MSG_BACK, back).code == R.SUCCESS
    [letter] = env.admin.run(lambda admin: admin.dead_letters(group))
    assert letter.message.message_id == message_id
    nowhere = session.call(Q.CONSUMER_SEND_MSG_BACK, back | {"offset": "999999999"})
    assert nowhere.code != R.SUCCESS
    session.close()


def test_a_heartbeat_creating_its_group_registers_the_retry_topic(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    config = {**FAST_BROKER, "broker": {**FAST_BROKER["broker"], "auto_create_groups": True}}
    with (
        scratch_dir(tmp_path_factory, "remoting-auto-groups") as root,
        BrokerProcess(root / "broker", config=config, grpc_port=None) as broker,
        SyncAdmin(servers=broker.address) as admin,
    ):
        admin.create_topic("auto-topic", queues=1)
        route = {"topic": "%RETRY%auto-group"}
        assert ask(broker.namesrv, Q.GET_ROUTEINFO_BY_TOPIC, route).code == R.TOPIC_NOT_EXIST
        session = Session(broker.address)
        answer = session.call(Q.HEART_BEAT, body=heartbeat("c1", "auto-group", "auto-topic"))
        assert answer.code == R.SUCCESS
        # registered before the heartbeat was answered: the consumer's next route query finds it
        found = ask(broker.namesrv, Q.GET_ROUTEINFO_BY_TOPIC, route)
        assert found.code == R.SUCCESS
        assert json.loads(found.body.replace(b"{0:", b'{"0":'))["queueDatas"][0]["perm"] == 6
        session.close()


def test_remoting_consumers_are_counted_with_their_language(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with (
        scratch_dir(tmp_path_factory, "remoting-metrics") as root,
        BrokerProcess(root / "broker", config=FAST_BROKER, grpc_port=None, http_port=0) as broker,
        SyncAdmin(servers=broker.address) as admin,
    ):
        admin.create_topic("counted", queues=1)
        admin.create_group("counted-group")
        session = Session(broker.address)
        body = heartbeat("c1", "counted-group", "counted")
        assert session.call(Q.HEART_BEAT, body=body).code == R.SUCCESS
        with urllib.request.urlopen(f"http://{broker.http}/metrics", timeout=10) as page:
            text = page.read().decode()
        session.close()
    assert 'rocketmq_consumer_connections{language="java",protocol="remoting"} 1.0' in text


def test_a_pulling_consumer_stays_a_member_between_its_heartbeats(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """RocketMQ's clients heartbeat every 30 s, the broker's ``consumer_expiry`` is 30 s: a
    consumer that keeps pulling stays registered; one that goes silent is dropped."""
    config = {**FAST_BROKER, "broker": {**FAST_BROKER["broker"], "consumer_expiry": 1.5}}
    with (
        scratch_dir(tmp_path_factory, "remoting-expiry") as root,
        BrokerProcess(root / "broker", config=config, grpc_port=None) as broker,
        SyncAdmin(servers=broker.address) as admin,
    ):
        admin.create_topic("kept", queues=1)
        admin.create_group("kept-group")
        session = Session(broker.address)
        assert session.call(Q.HEART_BEAT, body=heartbeat("c1", "kept-group", "kept")).code == 0
        members = {"consumerGroup": "kept-group"}
        deadline = time.monotonic() + 4.0  # well past the expiry, no heartbeat
        while time.monotonic() < deadline:
            pulled = session.call(
                Q.PULL_MESSAGE, pull_fields("kept-group", "kept", 0, 0, sysFlag=4)
            )
            assert pulled.code == R.PULL_NOT_FOUND
            listing = session.call(Q.GET_CONSUMER_LIST_BY_GROUP, members)
            assert json.loads(listing.body)["consumerIdList"] == ["c1"]
            time.sleep(0.2)
        time.sleep(2.5)  # silent: forgotten
        listing = session.call(Q.GET_CONSUMER_LIST_BY_GROUP, members)
        assert json.loads(listing.body)["consumerIdList"] == []
        session.close()


def test_a_pull_without_its_subscription_filters_by_the_heartbeated_one(env: Env) -> None:
    topic, group = env.topic_and_group(queues=1)
    for tag in ("TagA", "TagB", "TagA"):
        env.send(topic, tag, tag)
    session = env.session()
    body = heartbeat("c1", group, topic).replace(b'"subString": "*"', b'"subString": "TagB"')
    assert session.call(Q.HEART_BEAT, body=body).code == R.SUCCESS
    fields = pull_fields(group, topic, 0, 0, sysFlag=0)  # PullSysFlag: no subscription given
    del fields["subscription"]
    answer = session.call(Q.PULL_MESSAGE, fields)
    assert [r.body for r in decode_stored(answer.body)] == [b"TagB"]
    session.close()
