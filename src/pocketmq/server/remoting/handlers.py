"""The broker's remoting handler table, built from its families (docs/remoting.md, "How the
handlers plug in").

Each family is a module of ``server/remoting`` with a function taking the :class:`BrokerSide`
and returning its part of the table: the producer side (``produce.py``: sends;
``transactions.py``: ``END_TRANSACTION`` and the check-backs), the consumer side (heartbeats,
pulls, offsets, send-backs, locks: ``consume.py``, ``clients.py``, ``pulls.py``,
``offsets.py``) and administration
(``admin.py``). With the ACL on, every handler is checked first (``permissions.py``). What a
connection's clients registered is dropped when it closes: each family may name a close hook
(:data:`CLOSE_HOOKS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pocketmq.server.remoting.admin import admin_handlers
from pocketmq.server.remoting.clients import drop_registrations
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.consume import consumer_handlers
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.permissions import remoting_authorized
from pocketmq.server.remoting.produce import produce_handlers
from pocketmq.server.remoting.transactions import producer_hook, transaction_handlers
from pocketmq.server.serving import answers_expected

__all__ = ["CLOSE_HOOKS", "FAMILIES", "broker_remoting_handlers", "connection_closed"]

Family = Callable[[BrokerSide], RemotingHandlerTable]
CloseHook = Callable[[BrokerSide, RemotingConnection], None]


def _consumer_side(side: BrokerSide) -> RemotingHandlerTable:
    """Heartbeats (with their producer groups: :func:`producer_hook`), pulls, offsets,
    send-backs, locks (``consume.py``)."""
    return consumer_handlers(
        side.broker,
        side.store_host,
        on_producers=producer_hook(side),
        topics_changed=side.topics_changed,
    )


FAMILIES: Final[list[Family]] = [
    produce_handlers,
    transaction_handlers,
    _consumer_side,
    admin_handlers,
]
"""The handler families, in order (a later one's code would replace an earlier one's)."""

CLOSE_HOOKS: Final[list[CloseHook]] = [lambda side, conn: drop_registrations(side.broker, conn)]
"""What each family drops when a connection closes (its clients' registrations)."""


def broker_remoting_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """The broker's remoting table: every family's handlers, each checked against the ACL
    when there is one (module doc)."""
    table: RemotingHandlerTable = {}
    # a long poll woken by a send is answered in the send's loop turn (server/serving.py)
    side.broker.on_long_poll_wake(answers_expected)
    for family in FAMILIES:
        table |= family(side)
    return remoting_authorized(table, side)


def connection_closed(side: BrokerSide, conn: RemotingConnection) -> None:
    """A remoting connection closed: each family drops what its clients registered."""
    for hook in CLOSE_HOOKS:
        hook(side, conn)
