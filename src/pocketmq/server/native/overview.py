"""``BROKER_OVERVIEW``: this broker's figures for the cluster view of any broker's dashboard
(protocol/overview.py, server/figures.py; docs/operations.md, "Cluster view")."""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.protocol import structs as w
from pocketmq.protocol.codes import RequestCode
from pocketmq.server.native.connection import HandlerTable, ServerConnection

__all__ = ["overview_handlers"]


def overview_handlers(build: Callable[[], w.BrokerOverviewResponse]) -> HandlerTable:
    """The handler answering ``BROKER_OVERVIEW`` with ``build()`` (it needs ``Get`` on the
    cluster under an ACL, like ``BROKER_STATUS``: server/native/permissions.py)."""

    def broker_overview(conn: ServerConnection, req: w.Empty) -> w.BrokerOverviewResponse:
        return build()

    return {RequestCode.BROKER_OVERVIEW: broker_overview}
