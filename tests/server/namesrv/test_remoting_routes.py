"""The name server's remoting answers, from its route table (docs/remoting.md, "Name server"), on
an in-process name server reached through a real socket: RocketMQ's ``TopicRouteData`` with the
master as broker id 0 (after a failover too), slaves by id, fenced brokers left out,
read-only queues without a master; ``ClusterInfo`` and ``TopicList``; ``TOPIC_NOT_EXIST`` for
every topic without a route, as apache/rocketmq ``ClientRequestProcessor.getRouteInfoByTopic``
answers; no broker registration over remoting."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pocketmq.protocol import structs as w
from pocketmq.protocol.remoting import RemotingCommand, RemotingFrameDecoder, encode_command
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.server.namesrv.remoting import REGISTRATION_REFUSED, remoting_broker_ids
from pocketmq.server.namesrv.server import NameServer

from .test_routes import broker

TOPIC = [w.TopicSpec("T", 2, "normal", 6)]


@pytest.fixture
async def namesrv() -> AsyncIterator[NameServer]:
    server = NameServer()
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


async def ask(
    server: NameServer, code: int, fields: dict[str, str] | None = None, version: int = 0
) -> RemotingCommand:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(encode_command(RemotingCommand(code, 77, 0, fields or {}, version=version)))
        decoder = RemotingFrameDecoder()
        while True:
            data = await asyncio.wait_for(reader.read(1 << 20), 5)
            assert data, "closed without an answer"
            for answer in decoder.feed(data):
                assert answer.opaque == 77
                assert answer.is_response
                return answer
    finally:
        writer.close()


def _strict(body: bytes) -> Any:
    return json.loads(body)


async def test_a_route_names_the_master_as_id_0_and_counts_the_queues(
    namesrv: NameServer,
) -> None:
    namesrv.routes.register(broker(0, "master", 1), TOPIC)
    namesrv.routes.register(broker(1, "slave", 1), TOPIC)
    namesrv.routes.register(broker(0, "master", 1, name="g2"), [w.TopicSpec("T", 3, "normal", 6)])
    answer = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, version=401)
    assert answer.code == R.SUCCESS
    route = _strict(answer.body)
    assert route["brokerDatas"] == [
        {
            "brokerAddrs": {"0": "127.0.0.1:10000", "1": "127.0.0.1:10001"},
            "brokerName": "g1",
            "cluster": "DefaultCluster",
            "enableActingMaster": False,
        },
        {
            "brokerAddrs": {"0": "127.0.0.1:10000"},
            "brokerName": "g2",
            "cluster": "DefaultCluster",
            "enableActingMaster": False,
        },
    ]
    assert [
        (q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
        for q in route["queueDatas"]
    ] == [("g1", 2, 2, 6), ("g2", 3, 3, 6)]


async def test_old_clients_get_fastjson_s_form_unless_they_ask(namesrv: NameServer) -> None:
    namesrv.routes.register(broker(0, "master", 1), TOPIC)
    old = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, version=121)
    assert b'"brokerAddrs":{0:"127.0.0.1:10000"}' in old.body
    asked = await ask(
        namesrv,
        RC.GET_ROUTEINFO_BY_TOPIC,
        {"topic": "T", "acceptStandardJsonOnly": "true"},
        version=121,
    )
    assert b'"brokerAddrs":{"0":"127.0.0.1:10000"}' in asked.body


async def test_after_a_failover_the_new_master_is_id_0(namesrv: NameServer) -> None:
    """The promoted slave (id 1, a newer epoch) is what remoting clients send to; the former
    master, back as a slave, takes the id the new master left."""
    namesrv.routes.register(broker(1, "master", 2), TOPIC)
    namesrv.routes.register(broker(0, "slave", 2), TOPIC)
    answer = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, version=401)
    [group] = _strict(answer.body)["brokerDatas"]
    assert group["brokerAddrs"] == {"0": "127.0.0.1:10001", "1": "127.0.0.1:10000"}


async def test_a_fenced_broker_is_left_out(namesrv: NameServer) -> None:
    namesrv.routes.register(broker(1, "master", 2), TOPIC)
    namesrv.routes.register(broker(0, "master", 1), TOPIC)  # an older term: fenced
    native = namesrv.routes.route("T")
    assert [b.role for b in native.brokers] == ["master", "fenced"]
    answer = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, version=401)
    [group] = _strict(answer.body)["brokerDatas"]
    assert group["brokerAddrs"] == {"0": "127.0.0.1:10001"}


async def test_a_group_without_a_master_is_read_only_with_no_id_0(namesrv: NameServer) -> None:
    namesrv.routes.register(broker(0, "slave", 1), TOPIC)
    namesrv.routes.register(broker(2, "slave", 1), TOPIC)
    answer = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, version=401)
    route = _strict(answer.body)
    [group] = route["brokerDatas"]
    assert group["brokerAddrs"] == {"3": "127.0.0.1:10000", "2": "127.0.0.1:10002"}
    [queues] = route["queueDatas"]
    assert queues["perm"] == 4  # read only: RocketMQ's producers skip it, consumers read


def test_broker_ids_are_unique_in_every_shape() -> None:
    shapes = [
        [broker(0, "master", 1), broker(1, "slave", 1), broker(2, "slave", 1)],
        [broker(2, "master", 3), broker(0, "slave", 3), broker(1, "slave", 3)],
        [broker(0, "slave", 1), broker(1, "slave", 1)],
        [broker(1, "master", 2), broker(0, "fenced", 1), broker(2, "slave", 2)],
    ]
    for members in shapes:
        ids = remoting_broker_ids(members)
        listed = [b for b in members if b.role != "fenced"]
        assert sorted(ids.values()) == sorted(b.address for b in listed), members
        masters = [b.address for b in members if b.role == "master"]
        assert ids.get(0) == (masters[0] if masters else None)


@pytest.mark.parametrize(
    ("setup", "remark"),
    [
        ("none", "no broker is registered with this name server"),
        ("other", "does not exist on any broker"),
        ("gone", "went away"),
    ],
)
async def test_every_topic_without_a_route_is_topic_not_exist(
    namesrv: NameServer, setup: str, remark: str
) -> None:
    if setup == "other":
        namesrv.routes.register(broker(0, "master", 1), [w.TopicSpec("other", 1, "normal", 6)])
    elif setup == "gone":
        namesrv.routes.register(broker(0, "master", 1), TOPIC)
        namesrv.routes.unregister("g1", 0)
    answer = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert answer.code == R.TOPIC_NOT_EXIST
    assert remark in (answer.remark or "")
    assert answer.body == b""


async def test_a_route_request_without_a_topic_is_a_system_error(namesrv: NameServer) -> None:
    answer = await ask(namesrv, RC.GET_ROUTEINFO_BY_TOPIC)
    assert (answer.code, answer.remark) == (R.SYSTEM_ERROR, "the request has no topic field")


async def test_cluster_info_and_topic_list(namesrv: NameServer) -> None:
    namesrv.routes.register(broker(0, "master", 1), [w.TopicSpec("b", 1), w.TopicSpec("a", 1)])
    namesrv.routes.register(broker(1, "slave", 1), [w.TopicSpec("b", 1), w.TopicSpec("a", 1)])
    namesrv.routes.register(broker(0, "master", 1, name="g2"), [w.TopicSpec("c", 1)])
    info = await ask(namesrv, RC.GET_BROKER_CLUSTER_INFO, version=401)
    assert info.code == R.SUCCESS
    # fastjson's default form, whatever the version, as RocketMQ's name server sends it
    assert info.body == (
        b'{"brokerAddrTable":{"g1":{"brokerAddrs":{0:"127.0.0.1:10000",1:"127.0.0.1:10001"},'
        b'"brokerName":"g1","cluster":"DefaultCluster","enableActingMaster":false},'
        b'"g2":{"brokerAddrs":{0:"127.0.0.1:10000"},"brokerName":"g2",'
        b'"cluster":"DefaultCluster","enableActingMaster":false}},'
        b'"clusterAddrTable":{"DefaultCluster":["g1","g2"]}}'
    )
    topics = await ask(namesrv, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert _strict(topics.body) == {"topicList": ["a", "b", "c"]}


async def test_kv_config_is_never_found(namesrv: NameServer) -> None:
    answer = await ask(namesrv, RC.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
    assert answer.code == R.QUERY_NOT_FOUND


@pytest.mark.parametrize("code", [RC.REGISTER_BROKER, RC.UNREGISTER_BROKER])
async def test_no_broker_registers_over_remoting(namesrv: NameServer, code: int) -> None:
    namesrv.routes.register(broker(0, "master", 1), TOPIC)
    fields = {
        "brokerName": "g1",
        "brokerAddr": "10.0.0.9:10911",
        "clusterName": "c",
        "brokerId": "0",
    }
    answer = await ask(namesrv, code, fields)
    assert (answer.code, answer.remark) == (R.REQUEST_CODE_NOT_SUPPORTED, REGISTRATION_REFUSED)
    assert [b.address for b in namesrv.routes.brokers()] == ["127.0.0.1:10000"]
