"""What each remoting request needs from the ACL (docs/security.md, "Authorization"; the
remoting rows of docs/remoting.md, "Authentication"): the same rights as the native request
that does the same — producing needs ``Pub`` on the topic, consuming ``Sub`` on the group and
the topic, administration the matching ``Create``/``Update``/``Delete``/``Get``/``List``.

The signer of each request (``conn.user``, set before its handler runs) is checked in front of
every handler, as ``server/native/permissions.py`` does for the native table; a refusal is
``NO_PERMISSION`` (16). Sends take the native hot path's shortcut: each connection remembers the
topics it may publish to while the rules and users stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec

from pocketmq.errors import NoPermissionError
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.auth.acl import CLUSTER, Action
from pocketmq.server.auth.authorizer import Authorizer, Need, topic_need
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.remoting.connection import (
    RemotingConnection,
    RemotingHandler,
    RemotingHandlerTable,
)
from pocketmq.server.remoting.consumer_rights import CONSUMER_CODES, consumer_needs
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.produce import send_header
from pocketmq.server.remoting.transactions import transaction_topic

__all__ = ["NEEDS", "remoting_authorized", "remoting_needs"]

_A = Action
_RC = RequestCode
Needs = Callable[[BrokerSide, RemotingCommand], list[Need]]


def _group(group: str, action: Action = _A.SUB) -> Need:
    return ("Group", group, action)


def _cluster(action: Action) -> Needs:
    return lambda side, request: [("Cluster", CLUSTER, action)]


def _field(request: RemotingCommand, name: str) -> str:
    return request.ext_fields.get(name, "")


def _topic(action: Action, name: str = "topic") -> Needs:
    return lambda side, request: [topic_need(_field(request, name), action)]


def _consumer_side(side: BrokerSide, request: RemotingCommand) -> list[Need]:
    return consumer_needs(request)


def _subscription_group(side: BrokerSide, request: RemotingCommand) -> list[Need]:
    try:  # an unreadable body needs nothing here: its handler refuses it
        body = msgspec.json.decode(request.body)
    except msgspec.DecodeError:
        body = {}
    name = body.get("groupName", "") if isinstance(body, dict) else ""
    return [_group(str(name), _A.CREATE)]


def _stats(side: BrokerSide, request: RemotingCommand) -> list[Need]:
    found = [_group(_field(request, "consumerGroup"), _A.GET)]
    topic = _field(request, "topic")
    return [*found, topic_need(topic, _A.GET)] if topic else found


NEEDS: Final[dict[int, Needs]] = {
    _RC.SEND_MESSAGE: lambda side, request: [topic_need(send_header(request).topic, _A.PUB)],
    _RC.END_TRANSACTION: lambda side, r: [topic_need(transaction_topic(side, r), _A.PUB)],
    _RC.UPDATE_AND_CREATE_TOPIC: _topic(_A.CREATE),
    _RC.DELETE_TOPIC_IN_BROKER: _topic(_A.DELETE),
    _RC.GET_ALL_TOPIC_CONFIG: _cluster(_A.LIST),
    _RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _subscription_group,
    _RC.QUERY_MESSAGE: _topic(_A.GET),
    _RC.VIEW_MESSAGE_BY_ID: _cluster(_A.GET),  # an offset may name a message of any topic
    _RC.GET_CONSUME_STATS: _stats,
    _RC.GET_BROKER_RUNTIME_INFO: _cluster(_A.GET),
    _RC.INVOKE_BROKER_TO_RESET_OFFSET: lambda side, request: [
        _group(_field(request, "group"), _A.UPDATE),
        topic_need(_field(request, "topic"), _A.GET),
    ],
}
"""Each served code's needs; every code of the broker's table has a row (a test holds it)."""
NEEDS[_RC.SEND_MESSAGE_V2] = NEEDS[_RC.SEND_BATCH_MESSAGE] = NEEDS[_RC.SEND_MESSAGE]
for _code in CONSUMER_CODES:  # the consumer side's rows (consumer_rights.py)
    NEEDS[_code] = _consumer_side


def remoting_needs(side: BrokerSide, request: RemotingCommand) -> list[Need]:
    """What ``request`` needs; a code without a row needs the cluster's ``Update`` right
    (administrators only), so a handler added without one is never open to everyone."""
    find = NEEDS.get(request.code)
    if find is None:
        return [("Cluster", CLUSTER, _A.UPDATE)]
    return find(side, request)


_SENDS: Final = frozenset({_RC.SEND_MESSAGE, _RC.SEND_MESSAGE_V2, _RC.SEND_BATCH_MESSAGE})


def remoting_authorized(table: RemotingHandlerTable, side: BrokerSide) -> RemotingHandlerTable:
    """``table`` with each handler checking its request's signer against the ACL first."""
    authorizer = side.authorizer
    if authorizer is None:
        return table

    def may_publish(conn: RemotingConnection, request: RemotingCommand) -> None:
        generation = authorizer.current()
        allowed: set[str] | None = conn.state.get("may_publish")
        if allowed is None or conn.state.get("rules_seen") != generation:
            allowed = conn.state["may_publish"] = set()
            conn.state["rules_seen"] = generation
        topic = send_header(request).topic
        if topic not in allowed:
            _check(authorizer, conn, [topic_need(topic, _A.PUB)])
            allowed.add(topic)

    def wrap(code: int, handler: RemotingHandler) -> RemotingHandler:
        def checked(conn: RemotingConnection, request: RemotingCommand) -> Any:
            if conn.user:
                if code in _SENDS:
                    may_publish(conn, request)
                else:
                    _check(authorizer, conn, remoting_needs(side, request))
            return handler(conn, request)

        return checked

    return {code: wrap(code, handler) for code, handler in table.items()}


def _check(authorizer: Authorizer, conn: RemotingConnection, needs: list[Need]) -> None:
    try:
        authorizer.check(conn.user, needs, conn.remote)
    except NoPermissionError:
        count_failure("remoting", "forbidden")
        raise
