"""The broker's native-protocol handlers, one module per request family (as RocketMQ keeps one
processor per family): wire structures in, broker calls, wire structures out.

Fast operations return a structure; operations that may wait (send with sync flush, long polls)
return a coroutine and the connection runs it as a task. Each family is a class holding what
it needs and offering ``table()``; :func:`broker_handlers` merges the tables.

| family | module | requests |
|---|---|---|
| session | ``session.py`` | hello, authenticate, heartbeat, unregister, cancel |
| produce | ``produce.py`` | send, end and query a transaction, send back |
| consume | ``consume.py`` | pull, pop, ack, change invisible, offsets, consumers, locks |
| admin | ``admin.py`` | topics, groups, status, queues, offset resets, queries, history, redrive |
| cluster | ``cluster.py`` | routes, brokers, promote |
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pocketmq.broker import Broker
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.native.connection import HandlerTable
from pocketmq.server.native.handlers.admin import AdminHandlers
from pocketmq.server.native.handlers.cluster import BrokerLister, ClusterHandlers, RouteProvider
from pocketmq.server.native.handlers.consume import ConsumeHandlers
from pocketmq.server.native.handlers.produce import ProduceHandlers
from pocketmq.server.native.handlers.session import SessionHandlers

__all__ = [
    "AdminHandlers",
    "BrokerLister",
    "ClusterHandlers",
    "ConsumeHandlers",
    "ProduceHandlers",
    "RouteProvider",
    "SessionHandlers",
    "broker_handlers",
]


def broker_handlers(
    broker: Broker,
    route: RouteProvider,
    list_brokers: BrokerLister,
    topics_changed: Callable[[], Awaitable[None]],
    promote: Callable[[bool], Awaitable[int]] | None = None,
    authenticator: Authenticator | None = None,
    authorizer: Authorizer | None = None,
) -> HandlerTable:
    """Every family's table, merged. ``topics_changed`` is awaited after topics or groups change:
    the app re-registers with the name server before answering, so a route is there as soon as
    the topic is created. ``authenticator``: authentication is required, of users, the cluster's
    members and the broker's own proxy workers (docs/security.md). ``authorizer``: the ACL, for
    what the request table of server/native/permissions.py cannot decide alone (which producers
    see a check, which groups an unregister may leave)."""
    session = SessionHandlers(broker, authenticator, authorizer)
    return {
        **session.table(),
        **ProduceHandlers(broker, session.may_relay).table(),
        **ConsumeHandlers(broker).table(),
        **AdminHandlers(broker, topics_changed).table(),
        **ClusterHandlers(broker, route, list_brokers, promote).table(),
    }
