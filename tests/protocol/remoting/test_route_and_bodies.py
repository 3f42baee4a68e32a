"""The name server's JSON answers and the clients' JSON bodies.

Route JSON follows apache/rocketmq ``route/TopicRouteData.java``, ``BrokerData.java``,
``QueueData.java`` and ``body/ClusterInfo.java`` as fastjson writes them: by default with
unquoted numeric map keys (``{0:"addr"}``), strictly for clients of 4.9.4 and later or those
asking ``acceptStandardJsonOnly`` (``namesrv/.../ClientRequestProcessor.java``). Bodies follow
``heartbeat/HeartbeatData.java`` and its parts, ``body/LockBatchRequestBody.java`` and
``header/GetConsumerListByGroupResponseBody.java``.
"""

from __future__ import annotations

import json
import re

import pytest

from pocketmq.errors import ProtocolError
from pocketmq.protocol.remoting.bodies import (
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequest,
    LockBatchResponse,
    MessageQueue,
    decode_json_body,
    encode_json_body,
)
from pocketmq.protocol.remoting.route import (
    BrokerData,
    QueueData,
    cluster_info_json,
    standard_json_for,
    topic_list_json,
    topic_route_json,
)

_BROKERS = [BrokerData("DefaultCluster", "broker-a", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})]
_QUEUES = [QueueData("broker-a", 4, 4)]


def _quote_numeric_keys(text: str) -> str:
    return re.sub(r"([{,])(\d+):", r'\1"\2":', text)


def test_the_default_route_json_is_fastjsons_with_bare_numeric_keys() -> None:
    text = topic_route_json(_BROKERS, _QUEUES, standard=False).decode()
    assert text == (
        '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
        '"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],'
        '"filterServerTable":{},'
        '"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        '"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_the_standard_route_json_is_json_with_the_same_content() -> None:
    standard = topic_route_json(_BROKERS, _QUEUES, standard=True).decode()
    legacy = topic_route_json(_BROKERS, _QUEUES, standard=False).decode()
    assert json.loads(standard) == json.loads(_quote_numeric_keys(legacy))
    route = json.loads(standard)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    assert route["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
         "writeQueueNums": 4}
    ]  # fmt: skip


def test_names_with_quotes_are_escaped() -> None:
    text = topic_route_json(
        [BrokerData('c"1', 'b"\\', {0: "h:1"})], [QueueData('b"\\', 1, 1)], True, 'x"y'
    )
    route = json.loads(text)
    assert route["brokerDatas"][0]["cluster"] == 'c"1'
    assert route["orderTopicConf"] == 'x"y'


@pytest.mark.parametrize(
    ("version", "fields", "standard"),
    [
        (121, {}, False),  # ali-ons (3.4.9)
        (399, {}, False),  # 4.9.3
        (401, {}, True),  # 4.9.4
        (121, {"acceptStandardJsonOnly": "true"}, True),
        (121, {"acceptStandardJsonOnly": "false"}, False),
    ],
)
def test_strict_json_goes_to_clients_that_ask_or_are_recent(
    version: int, fields: dict[str, str], standard: bool
) -> None:
    assert standard_json_for(version, fields) is standard


def test_cluster_info_and_topic_list() -> None:
    brokers = [*_BROKERS, BrokerData("Other", "broker-b", {0: "10.0.0.3:10911"})]
    info = json.loads(_quote_numeric_keys(cluster_info_json(brokers, standard=False).decode()))
    assert set(info["brokerAddrTable"]) == {"broker-a", "broker-b"}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "10.0.0.3:10911"}
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"], "Other": ["broker-b"]}
    assert json.loads(topic_list_json(["b", "a"])) == {"topicList": ["a", "b"]}


def test_a_java_heartbeat_decodes() -> None:
    # HeartbeatData as fastjson writes it for a DefaultMQPushConsumer (enums by name, sorted)
    body = (
        b'{"clientID":"10.0.0.9@4242","consumerDataSet":[{"consumeFromWhere":'
        b'"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"CG",'
        b'"messageModel":"BROADCASTING","subscriptionDataSet":[{"classFilterMode":false,'
        b'"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":17,'
        b'"tagsSet":["TagA"],"topic":"T"}],"unitMode":false}],"heartbeatFingerprint":0,'
        b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}'
    )
    heartbeat = decode_json_body(body, HeartbeatData)
    assert heartbeat.client_id == "10.0.0.9@4242"
    [consumer] = heartbeat.consumer_data_set
    assert (consumer.group_name, consumer.message_model) == ("CG", "BROADCASTING")
    [subscription] = consumer.subscription_data_set
    assert (subscription.topic, subscription.tags_set, subscription.code_set) == (
        "T",
        ["TagA"],
        [2598919],
    )
    assert [p.group_name for p in heartbeat.producer_data_set] == ["CLIENT_INNER_PRODUCER"]


def test_lock_bodies_use_rocketmqs_names() -> None:
    request = decode_json_body(
        b'{"consumerGroup":"G","clientId":"c","onlyThisBroker":false,'
        b'"mqSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}',
        LockBatchRequest,
    )
    assert request.mq_set == [MessageQueue("T", "b", 1)]
    assert json.loads(encode_json_body(LockBatchResponse(request.mq_set))) == {
        "lockOKMQSet": [{"topic": "T", "brokerName": "b", "queueId": 1}]
    }
    assert json.loads(encode_json_body(ConsumerListBody(["a", "b"]))) == {
        "consumerIdList": ["a", "b"]
    }


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'{"clientID":5}', b'{"producerDataSet":[]}'])
def test_a_body_that_does_not_decode_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="HeartbeatData"):
        decode_json_body(body, HeartbeatData)
