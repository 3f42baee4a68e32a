"""The name server's JSON answers: ``TopicRouteData`` (``GET_ROUTEINFO_BY_TOPIC``),
``ClusterInfo`` (``GET_BROKER_CLUSTER_INFO``) and ``TopicList``
(``GET_ALL_TOPIC_LIST_FROM_NAMESERVER``) (docs/remoting.md, "Name server").

RocketMQ writes them with fastjson, whose default output is not strict JSON: a map keyed by
numbers — a broker's ``brokerAddrs``, broker id to address — has unquoted keys,
``{0:"127.0.0.1:10911"}``. Clients of 4.9.4 and later (request ``version`` ≥ 401) and those
asking with ``acceptStandardJsonOnly=true`` get strict JSON instead, with quoted keys
(apache/rocketmq ``namesrv/.../ClientRequestProcessor.java``). These builders write either
form, fields in fastjson's (alphabetical) order, so every client reads what RocketMQ's own name
server would send it: ali-ons parses both with JSON2 (``lib/mq_client_api.js``), Java's fastjson
both, and older clients that split the text themselves see the form they were written for.
Field names follow ``route/TopicRouteData.java``, ``BrokerData.java``, ``QueueData.java``,
``body/ClusterInfo.java`` and ``body/TopicList.java``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from pocketmq.protocol.remoting.codes import VERSION_V4_9_4

__all__ = [
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "QueueData",
    "cluster_info_json",
    "standard_json_for",
    "topic_list_json",
    "topic_route_json",
]

#: ``PermName``: a queue's permission bits.
PERM_READ: Final = 0x4
PERM_WRITE: Final = 0x2
PERM_INHERIT: Final = 0x1

_string = msgspec.json.Encoder().encode


class QueueData(msgspec.Struct, frozen=True, gc=False):
    """A broker's queues of a topic: read and write counts and the permission bits."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


class BrokerData(msgspec.Struct, frozen=True, gc=False):
    """A broker group: its cluster, name and the address of each member by broker id (0 is the
    master)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]


def standard_json_for(version: int, ext_fields: Mapping[str, str]) -> bool:
    """Whether a route request asks for strict JSON: its client is 4.9.4 or later, or it set
    ``acceptStandardJsonOnly``."""
    return version >= VERSION_V4_9_4 or ext_fields.get("acceptStandardJsonOnly") == "true"


def _broker_json(broker: BrokerData, standard: bool) -> str:
    entries = sorted(broker.broker_addrs.items())
    if standard:
        addrs = ",".join(f'"{broker_id}":{_string(a).decode()}' for broker_id, a in entries)
    else:
        addrs = ",".join(f"{broker_id}:{_string(a).decode()}" for broker_id, a in entries)
    return (
        f'{{"brokerAddrs":{{{addrs}}},"brokerName":{_string(broker.broker_name).decode()},'
        f'"cluster":{_string(broker.cluster).decode()},"enableActingMaster":false}}'
    )


def _queue_json(queue: QueueData) -> str:
    return (
        f'{{"brokerName":{_string(queue.broker_name).decode()},"perm":{int(queue.perm)},'
        f'"readQueueNums":{int(queue.read_queue_nums)},'
        f'"topicSysFlag":{int(queue.topic_sys_flag)},'
        f'"writeQueueNums":{int(queue.write_queue_nums)}}}'
    )


def topic_route_json(
    brokers: Iterable[BrokerData],
    queues: Iterable[QueueData],
    standard: bool,
    order_topic_conf: str | None = None,
) -> bytes:
    """A ``TopicRouteData`` body: the brokers serving the topic and their queues."""
    fields = [
        f'"brokerDatas":[{",".join(_broker_json(b, standard) for b in brokers)}]',
        '"filterServerTable":{}',
    ]
    if order_topic_conf is not None:
        fields.append(f'"orderTopicConf":{_string(order_topic_conf).decode()}')
    fields.append(f'"queueDatas":[{",".join(_queue_json(q) for q in queues)}]')
    return ("{" + ",".join(fields) + "}").encode()


def cluster_info_json(brokers: Iterable[BrokerData], standard: bool) -> bytes:
    """A ``ClusterInfo`` body: every broker group by name, and the groups of each cluster."""
    by_name = sorted(brokers, key=lambda b: b.broker_name)
    clusters: dict[str, list[str]] = {}
    for broker in by_name:
        clusters.setdefault(broker.cluster, []).append(broker.broker_name)
    table = ",".join(
        f"{_string(b.broker_name).decode()}:{_broker_json(b, standard)}" for b in by_name
    )
    names = ",".join(
        f"{_string(cluster).decode()}:{_string(members).decode()}"
        for cluster, members in sorted(clusters.items())
    )
    return f'{{"brokerAddrTable":{{{table}}},"clusterAddrTable":{{{names}}}}}'.encode()


def topic_list_json(topics: Iterable[str]) -> bytes:
    """A ``TopicList`` body: topic names (``brokerAddr`` is null for the name server's answer,
    and fastjson leaves null fields out)."""
    return b'{"topicList":' + _string(sorted(topics)) + b"}"
