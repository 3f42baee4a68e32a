"""Issue 31, the broker's administration and query requests over remoting against a real
broker (docs/remoting.md, "Admin and queries"), with the bodies RocketMQ's tools read:
``UpdateAndCreateTopic``/``DeleteTopic`` headers, ``TopicConfigSerializeWrapper``,
``SubscriptionGroupConfig``, ``QueryMessageRequestHeader`` (by ``KEYS`` and by ``UNIQ_KEY``),
``ViewMessageRequestHeader`` (the commit-log offset of an ``offsetMsgId``), ``ConsumeStats`` and
``ResetOffsetBody`` (fastjson's ``MessageQueue`` map keys), ``KVTable`` (apache/rocketmq 5.3.3,
``remoting/.../protocol/header`` and ``protocol/body``).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from pocketmq.client.sync import SyncAdmin
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.msgid import decode_offset_msg_id
from pocketmq.protocol.remoting.properties import encode_properties
from pocketmq.protocol.remoting.stored import decode_stored
from pocketmq.testing import BrokerProcess

from ..integration.conftest import unique
from .raw import Session

pytestmark = pytest.mark.integration


def _fastjson(body: bytes) -> object:
    """fastjson's object map keys made standard JSON (their text becomes a string key)."""
    text = re.sub(
        r'(\{"brokerName":[^{}]*\}):', lambda m: json.dumps(m.group(1)) + ":", body.decode()
    )
    return json.loads(text)


def test_topics_groups_queries_stats_and_resets(broker: BrokerProcess) -> None:
    topic, group = unique("adm-topic"), unique("adm-group")
    with Session(broker.address) as client:
        header = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2",
                  "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": "0", "order": "false"}  # fmt: skip
        created = client.call(RC.UPDATE_AND_CREATE_TOPIC, header)
        assert created.code == R.SUCCESS, created.remark
        table = json.loads(client.call(RC.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        assert (table[topic]["writeQueueNums"], table[topic]["perm"]) == (2, 6)
        body = json.dumps({"groupName": group, "consumeBroadcastEnable": False,
                           "retryMaxTimes": 3, "retryQueueNums": 1}).encode()  # fmt: skip
        assert client.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body).code == R.SUCCESS
        properties = encode_properties({"UNIQ_KEY": "U" * 32, "KEYS": "order-7", "TAGS": "t"})
        fields = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": "0",
                  "g": str(int(time.time() * 1000)), "h": "0", "i": properties}  # fmt: skip
        sent = client.call(RC.SEND_MESSAGE_V2, fields, b"find me")
        assert sent.code == R.SUCCESS, sent.remark
        by_key = client.call(RC.QUERY_MESSAGE, {"topic": topic, "key": "order-7", "maxNum": "32",
                             "beginTimestamp": "0", "endTimestamp": str(2**62)})  # fmt: skip
        assert by_key.code == R.SUCCESS, by_key.remark
        [found] = decode_stored(by_key.body)
        assert (found.body, found.properties["UNIQ_KEY"]) == (b"find me", "U" * 32)
        by_id = client.call(RC.QUERY_MESSAGE, {"topic": topic, "key": "U" * 32, "maxNum": "32",
                            "beginTimestamp": "0", "endTimestamp": str(2**62),
                            "_UNIQUE_KEY_QUERY": "true"})  # fmt: skip
        assert [m.body for m in decode_stored(by_id.body)] == [b"find me"]
        missing = client.call(RC.QUERY_MESSAGE, {"topic": topic, "key": "nope", "maxNum": "32",
                              "beginTimestamp": "0", "endTimestamp": "0"})  # fmt: skip
        assert missing.code == R.QUERY_NOT_FOUND
        offset = decode_offset_msg_id(sent.ext_fields["msgId"]).commit_log_offset
        viewed = client.call(RC.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
        [record] = decode_stored(viewed.body)
        assert (record.body, record.commit_log_offset, record.queue_id) == (b"find me", offset, 1)
        assert client.call(RC.VIEW_MESSAGE_BY_ID, {"offset": "999999999"}).code == R.QUERY_NOT_FOUND
        header = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
        reset = client.call(RC.INVOKE_BROKER_TO_RESET_OFFSET, header)
        assert reset.code == R.SUCCESS, reset.remark
        moved = _fastjson(reset.body)
        assert isinstance(moved, dict)
        assert sorted(moved["offsetTable"].values()) == [0, 0]
        stats = client.call(RC.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
        offsets = _fastjson(stats.body)
        assert isinstance(offsets, dict)
        rows = {json.loads(k)["queueId"]: v for k, v in offsets["offsetTable"].items()}
        assert rows[1]["brokerOffset"] == 1
        assert rows[1]["consumerOffset"] == 0
        info = json.loads(client.call(RC.GET_BROKER_RUNTIME_INFO).body)["table"]
        assert info["brokerVersion"] == "401"
        assert int(info["msgPutTotalTodayNow"]) >= 1
        assert client.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": topic}).code == R.SUCCESS
    with SyncAdmin(servers=broker.address) as admin:
        assert topic not in {t.name for t in admin.list_topics()}
