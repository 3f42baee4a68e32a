"""The cluster family: ``GET_ROUTE``, ``LIST_BROKERS`` and ``PROMOTE`` (answered from what the
app knows of the name server and the replication group)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pocketmq.broker import Broker
from pocketmq.errors import UnsupportedError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.native.connection import HandlerTable, ServerConnection

__all__ = ["BrokerLister", "ClusterHandlers", "RouteProvider"]

RouteProvider = Callable[[str], Awaitable[w.RouteResponse]]
BrokerLister = Callable[[], Awaitable[w.ListBrokersResponse]]


class ClusterHandlers:
    """Routes and brokers as the app knows them, and an operator's promotion."""

    def __init__(
        self,
        broker: Broker,
        route: RouteProvider,
        list_brokers: BrokerLister,
        promote: Callable[[bool], Awaitable[int]] | None = None,
    ) -> None:
        self._broker = broker
        self._route = route
        self._list_brokers = list_brokers
        self._promote = promote

    async def get_route(self, conn: ServerConnection, req: w.GetRouteRequest) -> w.RouteResponse:
        """A topic's route, as the name server would answer it."""
        return await self._route(req.topic)

    async def brokers(self, conn: ServerConnection, req: w.Empty) -> w.ListBrokersResponse:
        """The brokers of the cluster."""
        return await self._list_brokers()

    async def promote(self, conn: ServerConnection, req: w.PromoteRequest) -> w.PromoteResponse:
        """Make this slave the master (``force``: even while its master may be up)."""
        if self._promote is None:
            raise UnsupportedError("this broker cannot be promoted (no replication)")
        epoch = await self._promote(req.force)
        return w.PromoteResponse(epoch, self._broker.write_position)

    def table(self) -> HandlerTable:
        """The family's request codes and their handlers."""
        return {
            RequestCode.GET_ROUTE: self.get_route,
            RequestCode.LIST_BROKERS: self.brokers,
            RequestCode.PROMOTE: self.promote,
        }
