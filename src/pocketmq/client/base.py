"""What every SDK resource shares: a client config, a connection pool, a route cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar, Self, TypeVar

import msgspec

from pocketmq.client.config import ClientConfig, parse_servers
from pocketmq.client.connection import ClientConnection, PushHandler
from pocketmq.client.pool import ConnectionPool
from pocketmq.client.routes import RouteCache
from pocketmq.errors import BrokerConnectionError, ClosedError, PocketMQError, UnsupportedError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["AsyncResource", "ClientBase", "resolve_config"]

T = TypeVar("T")


def resolve_config(
    servers: Sequence[str] | str | None, client: ClientConfig | None
) -> ClientConfig:
    """The client config with ``servers`` applied: every resource takes both, so that the
    common case needs only ``servers="host:port"``."""
    client = client or ClientConfig()
    if servers is None:
        return client
    # A string may list several servers ("h1:p1,h2:p2"), as POCKETMQ_SERVER and --server do.
    servers = parse_servers(servers) if isinstance(servers, str) else tuple(servers)
    return replace(client, servers=servers)


class AsyncResource:
    """Something an application starts, uses and closes: usable as ``async with``, and
    :meth:`_check_open` is the one place that refuses work before the start or after the close
    (:class:`~pocketmq.errors.ClosedError`). Subclasses set ``_started`` and ``_closed``."""

    _what: ClassVar[str] = "client"
    _started: bool = False
    _closed: bool = False

    async def start(self) -> None:
        """Get ready to work; ``async with`` calls it."""

    async def aclose(self) -> None:
        """Finish and release everything; ``async with`` calls it."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_not_closed(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._what} was closed")

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._what} was closed")
        if not self._started:
            raise ClosedError(f"{self._what} not started: use `async with` or await start()")


class ClientBase(AsyncResource):
    """The connections and routes of one SDK resource (producer, consumer, admin client).

    Each resource has its own pool, so closing one never breaks another's requests.
    ``on_push`` receives the one-way requests brokers send (group changes, transaction checks).
    """

    def __init__(self, config: ClientConfig, on_push: PushHandler | None = None) -> None:
        self.client_config = config
        self.pool = ConnectionPool(
            config.client_id,
            config.connect_timeout,
            on_push,
            config.ssl_context(),
            (config.access_key, config.secret_key),
        )
        self.routes = RouteCache(self.pool, config)

    def listen(self, on_push: PushHandler) -> None:
        """Hand brokers' one-way requests to ``on_push`` from now on: for code that builds on
        this resource (the transaction producer answers checks arriving on its producer's
        connections). Call it before the first connection is opened."""
        self.pool.on_push = on_push

    async def _call_any(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        """Send a request to the first configured server that answers. A name server does not
        hold brokers' facts (groups, topics): it is asked for its brokers, and they are asked,
        masters first."""
        last: PocketMQError | None = None
        for server in self.client_config.servers:
            try:
                connection = await self.pool.get(server)
                return await connection.request(
                    code, body, reply, self.client_config.request_timeout
                )
            except BrokerConnectionError as exc:
                last = exc
            except UnsupportedError as exc:
                last = exc
                try:
                    return await self._ask_brokers_of(server, code, body, reply)
                except BrokerConnectionError as inner:
                    last = inner
        assert last is not None
        raise last

    async def _ask_brokers_of(
        self, namesrv: str, code: RequestCode, body: msgspec.Struct, reply: type[T]
    ) -> T:
        listing = await self._call(
            namesrv, RequestCode.LIST_BROKERS, w.Empty(), w.ListBrokersResponse
        )
        brokers = sorted(listing.brokers, key=lambda b: (b.role != "master", b.name, b.broker_id))
        last: BrokerConnectionError | None = None
        for broker in brokers:
            try:
                return await self._call(broker.address, code, body, reply)
            except BrokerConnectionError as exc:
                last = exc
        raise last or BrokerConnectionError(f"name server {namesrv} lists no broker")

    async def _call(
        self,
        address: str,
        code: RequestCode,
        body: msgspec.Struct,
        reply: type[T],
        timeout: float | None = None,
    ) -> T:
        """One raw request to ``address`` (``timeout``: the client's request timeout unless
        given). Private: applications use the typed methods; tests that need raw frames
        (hostile input) call it on an :class:`~pocketmq.client.Admin`."""
        connection: ClientConnection = await self.pool.get(address)
        return await connection.request(
            code, body, reply, timeout or self.client_config.request_timeout
        )

    async def close_base(self) -> None:
        """Stop refreshing routes and close every connection."""
        await self.routes.close()
        await self.pool.close()
