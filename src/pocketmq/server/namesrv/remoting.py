"""The name server's answers to RocketMQ's remoting clients (docs/remoting.md, "Name server"):
``GET_ROUTEINFO_BY_TOPIC``, ``GET_BROKER_CLUSTER_INFO``, ``GET_ALL_TOPIC_LIST_FROM_NAMESERVER``
and ``GET_KV_CONFIG``, read from the same :class:`RouteTable` the native requests read.

A route names each broker by the address its native clients use: the broker's port serves
both protocols (``server/listening.py``), so that address is also its remoting one. RocketMQ's
clients send to broker id 0 and read from any id, so a group's master is given id 0 and its
slaves ids of their own (:func:`remoting_broker_ids`), whatever ids they registered with — after
a failover the new master is id 0 again, as a remoting client following it expects. A broker
listed ``fenced`` (it registered as master but is not its group's master) is left out: it
serves no reads nor writes.

A topic no live broker holds is ``TOPIC_NOT_EXIST`` (17), whatever the reason the native answer
gives (no broker has it; the brokers holding it went away; none registered), as RocketMQ's
``ClientRequestProcessor`` answers it — the remark keeps pocketmq's reason. Brokers register over
the native protocol only: ``REGISTER_BROKER`` and ``UNREGISTER_BROKER`` over remoting are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pocketmq.errors import ServiceUnavailableError, TopicNotFoundError
from pocketmq.protocol import structs as w
from pocketmq.protocol.remoting.codes import RequestCode, ResponseCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.protocol.remoting.route import (
    BrokerData,
    QueueData,
    cluster_info_json,
    standard_json_for,
    topic_list_json,
    topic_route_json,
)
from pocketmq.server.auth.acl import CLUSTER
from pocketmq.server.namesrv.routes import RouteTable
from pocketmq.server.remoting import RemotingConnection, RemotingHandlerTable, Reply

__all__ = ["REGISTRATION_REFUSED", "namesrv_remoting_handlers", "remoting_broker_ids"]

#: Why a broker registration over remoting is refused.
REGISTRATION_REFUSED: Final = (
    "pocketmq brokers register over pocketmq's native protocol only; this name server takes no "
    'broker registration over RocketMQ\'s remoting protocol (docs/remoting.md, "Name server")'
)


def remoting_broker_ids(members: Iterable[w.BrokerAddress]) -> dict[int, str]:
    """A group's members by the broker id RocketMQ's clients expect: its master 0, a slave its
    own id — a slave registered as 0 (a former master) takes the master's id, or the next free
    one in a group without a master. Fenced brokers are left out (module doc)."""
    members = list(members)
    master = next((b for b in members if b.role == "master"), None)
    ids: dict[int, str] = {} if master is None else {0: master.address}
    spare = max((b.broker_id for b in members), default=0) + 1
    for broker in members:
        if broker.role != "slave":
            continue
        broker_id = broker.broker_id
        if broker_id == 0:
            broker_id = master.broker_id if master is not None and master.broker_id else spare
        ids[broker_id] = broker.address
    return ids


def _groups(brokers: Iterable[w.BrokerAddress]) -> dict[str, list[w.BrokerAddress]]:
    groups: dict[str, list[w.BrokerAddress]] = {}
    for broker in brokers:
        groups.setdefault(broker.name, []).append(broker)
    return groups


def _broker_datas(brokers: Iterable[w.BrokerAddress]) -> list[BrokerData]:
    return [
        BrokerData(CLUSTER, name, remoting_broker_ids(members))
        for name, members in _groups(brokers).items()
    ]


def _queue_datas(queues: Iterable[w.QueueRoute]) -> list[QueueData]:
    counts: dict[str, int] = {}
    perms: dict[str, int] = {}
    for queue in queues:
        counts[queue.broker_name] = counts.get(queue.broker_name, 0) + 1
        perms.setdefault(queue.broker_name, queue.perm)
    return [QueueData(name, count, count, perms[name]) for name, count in counts.items()]


def namesrv_remoting_handlers(routes: RouteTable) -> RemotingHandlerTable:
    """The remoting handler table of a name server reading ``routes`` (module doc)."""

    def route(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        topic = request.ext_fields.get("topic")
        if not topic:
            return Reply(ResponseCode.SYSTEM_ERROR, remark="the request has no topic field")
        try:
            found = routes.route(topic)
        except (TopicNotFoundError, ServiceUnavailableError) as exc:
            return Reply(ResponseCode.TOPIC_NOT_EXIST, remark=str(exc))
        standard = standard_json_for(request.version, request.ext_fields)
        body = topic_route_json(_broker_datas(found.brokers), _queue_datas(found.queues), standard)
        return Reply(body=body)

    def cluster_info(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        # always fastjson's default form, as RocketMQ's DefaultRequestProcessor sends it
        return Reply(body=cluster_info_json(_broker_datas(routes.brokers()), standard=False))

    def topic_list(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        return Reply(body=topic_list_json(routes.topics()))

    def kv_config(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        namespace, key = request.ext_fields.get("namespace"), request.ext_fields.get("key")
        remark = f"no config value for namespace {namespace!r}, key {key!r} (pocketmq keeps none)"
        return Reply(ResponseCode.QUERY_NOT_FOUND, remark=remark)

    def registration(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        return Reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=REGISTRATION_REFUSED)

    return {
        RequestCode.GET_ROUTEINFO_BY_TOPIC: route,
        RequestCode.GET_BROKER_CLUSTER_INFO: cluster_info,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topic_list,
        RequestCode.GET_KV_CONFIG: kv_config,
        RequestCode.REGISTER_BROKER: registration,
        RequestCode.UNREGISTER_BROKER: registration,
    }
