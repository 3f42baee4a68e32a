"""What each native request needs from the ACL (docs/security.md, "Authorization", the table of
operations): producing needs ``Pub`` on the topic, consuming ``Sub`` on the group and the topic,
administration the matching ``Create``/``Update``/``Delete``/``Get``/``List`` action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pocketmq.errors import NoPermissionError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.acl import CLUSTER, Action
from pocketmq.server.auth.authorizer import Authorizer, Need, topic_need
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.native.connection import Handler, HandlerTable, ServerConnection

__all__ = ["CLUSTER", "authorized", "needs"]


_A = Action


def _group(group: str, action: Action = _A.SUB) -> Need:
    return ("Group", group, action)


def _send(req: w.SendRequest) -> list[Need]:
    return [topic_need(t, _A.PUB) for t in {m.topic for m in req.messages}]


def _consume(group: str, topics: set[str]) -> list[Need]:
    return [_group(group), *(topic_need(t, _A.SUB) for t in topics)]


def _heartbeat(req: w.HeartbeatRequest) -> list[Need]:
    out: list[Need] = [topic_need(t, _A.PUB) for t in sorted(set(req.producer_topics))]
    for consumer in req.consumers:
        out += _consume(consumer.group, set(consumer.subscriptions))
    return out


def _query(req: w.QueryMessageRequest) -> list[Need]:
    if req.message_id:  # an id may name a message of any topic
        return [("Cluster", CLUSTER, _A.GET)]
    return [topic_need(req.topic, _A.GET)]


def _queue_status(req: w.QueueStatusRequest) -> list[Need]:
    found = [topic_need(req.topic, _A.GET)]
    return [*found, _group(req.group, _A.GET)] if req.group else found


_NEEDS: dict[int, Callable[[Any], list[Need]]] = {
    RequestCode.SEND: _send,
    RequestCode.END_TRANSACTION: lambda r: [topic_need(r.topic, _A.PUB)],
    RequestCode.SEND_BACK: lambda r: [_group(r.group)],
    RequestCode.PULL: lambda r: _consume(r.group, {r.topic}),
    RequestCode.POP: lambda r: _consume(r.group, {r.topic}),
    RequestCode.ACK: lambda r: _consume(r.group, {e.topic for e in r.entries}),
    RequestCode.CHANGE_INVISIBLE: lambda r: _consume(r.group, {r.topic}),
    RequestCode.FORWARD_TO_DEAD_LETTER: lambda r: _consume(r.group, {r.topic}),
    RequestCode.RECALL: lambda r: [topic_need(r.topic, _A.PUB)],
    RequestCode.GATEWAY_GROUP: lambda r: [_group(r.name, _A.GET)],
    RequestCode.REPORT_OUTCOMES: lambda r: [_group(r.group)],
    RequestCode.COMMIT_OFFSET: lambda r: _consume(r.group, {e.topic for e in r.entries}),
    RequestCode.QUERY_OFFSET: lambda r: _consume(r.group, {r.topic}),
    RequestCode.GET_CONSUMERS: lambda r: [_group(r.group)],
    RequestCode.LOCK_QUEUES: lambda r: _consume(r.group, {q.topic for q in r.queues}),
    RequestCode.UNLOCK_QUEUES: lambda r: _consume(r.group, {q.topic for q in r.queues}),
    RequestCode.HEARTBEAT: _heartbeat,
    RequestCode.QUERY_MESSAGE: _query,
    RequestCode.MESSAGE_HISTORY: lambda r: [("Cluster", CLUSTER, _A.GET)],
    RequestCode.QUERY_TRANSACTION: lambda r: [("Cluster", CLUSTER, _A.GET)],
    RequestCode.BROWSE: lambda r: [topic_need(r.topic, _A.GET)],
    RequestCode.REDRIVE: lambda r: [_group(r.group, _A.UPDATE)],
    RequestCode.CREATE_TOPIC: lambda r: [topic_need(r.name, _A.CREATE)],
    RequestCode.UPDATE_TOPIC: lambda r: [topic_need(r.name, _A.UPDATE)],
    RequestCode.DELETE_TOPIC: lambda r: [topic_need(r.name, _A.DELETE)],
    RequestCode.LIST_TOPICS: lambda r: [("Cluster", CLUSTER, _A.LIST)],
    RequestCode.CREATE_GROUP: lambda r: [_group(r.name, _A.CREATE)],
    RequestCode.DELETE_GROUP: lambda r: [_group(r.name, _A.DELETE)],
    RequestCode.LIST_GROUPS: lambda r: [("Cluster", CLUSTER, _A.LIST)],
    RequestCode.BROKER_STATUS: lambda r: [("Cluster", CLUSTER, _A.GET)],
    RequestCode.BROKER_OVERVIEW: lambda r: [("Cluster", CLUSTER, _A.GET)],
    RequestCode.QUEUE_STATUS: _queue_status,
    RequestCode.RESET_OFFSET: lambda r: [_group(r.group, _A.UPDATE), topic_need(r.topic, _A.GET)],
    RequestCode.PROMOTE: lambda r: [("Cluster", CLUSTER, _A.UPDATE)],
}


def needs(code: int, request: Any) -> list[Need]:
    """What ``request`` (of operation ``code``) needs; [] for what any authenticated client may
    do (``HELLO``, routes and the broker list, which name no data). ``UNREGISTER_CLIENT`` is
    checked by its handler: whether a group it names needs ``Sub`` depends on what the
    connection registered (a producer group of its own needs nothing)."""
    find = _NEEDS.get(code)
    return find(request) if find is not None else []


def authorized(table: HandlerTable, authorizer: Authorizer) -> HandlerTable:
    """``table`` with each handler checking its request's needs first (an authenticated
    connection only: before ``AUTHENTICATE`` the connection refuses everything anyway)."""

    def wrap_send(handler: Handler) -> Handler:
        # the hot path: each connection remembers the topics it may publish to, for as long as
        # the rules and users stay as they are (a set lookup per message instead of a check)
        def checked_send(conn: ServerConnection, request: w.SendRequest) -> Any:
            if conn.user:
                generation = authorizer.current()
                allowed: set[str] | None = conn.state.get("may_publish")
                if allowed is None or conn.state.get("rules_seen") != generation:
                    allowed = conn.state["may_publish"] = set()
                    conn.state["rules_seen"] = generation
                for message in request.messages:
                    if message.topic not in allowed:
                        try:
                            authorizer.check(
                                conn.user, [topic_need(message.topic, _A.PUB)], conn.remote
                            )
                        except NoPermissionError:
                            count_failure("native", "forbidden")
                            raise
                        allowed.add(message.topic)
            return handler(conn, request)

        return checked_send

    def wrap(code: int, handler: Handler) -> Handler:
        if code == RequestCode.SEND:
            return wrap_send(handler)

        def checked(conn: ServerConnection, request: Any) -> Any:
            if conn.user:
                try:
                    authorizer.check(conn.user, needs(code, request), conn.remote)
                except NoPermissionError:
                    count_failure("native", "forbidden")
                    raise
            return handler(conn, request)

        return checked

    return {code: wrap(code, handler) for code, handler in table.items()}
