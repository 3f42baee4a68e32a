"""What every SDK resource shares: a client config, a connection pool, a route cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import msgspec

from pocketmq.client.config import ClientConfig, parse_servers
from pocketmq.client.connection import ClientConnection, PushHandler
from pocketmq.client.pool import ConnectionPool
from pocketmq.client.routes import RouteCache
from pocketmq.errors import BrokerConnectionError
from pocketmq.protocol import RequestCode

__all__ = ["ClientBase", "resolve_config"]

T = TypeVar("T")


def resolve_config(
    servers: Sequence[str] | str | None, client: ClientConfig | None
) -> ClientConfig:
    client = client or ClientConfig()
    if servers is None:
        return client
    # A string may list several servers ("h1:p1,h2:p2"), as POCKETMQ_SERVER and --server do.
    servers = parse_servers(servers) if isinstance(servers, str) else tuple(servers)
    return replace(client, servers=servers)


class ClientBase:
    def __init__(self, config: ClientConfig, on_push: PushHandler | None = None) -> None:
        self.client_config = config
        self.pool = ConnectionPool(config.client_id, config.connect_timeout, on_push)
        self.routes = RouteCache(self.pool, config)

    async def call_any(self, code: RequestCode, body: msgspec.Struct, reply: type[T]) -> T:
        """Send a request to the first configured server that answers."""
        last: BrokerConnectionError | None = None
        for server in self.client_config.servers:
            try:
                connection = await self.pool.get(server)
                return await connection.request(
                    code, body, reply, self.client_config.request_timeout
                )
            except BrokerConnectionError as exc:
                last = exc
        assert last is not None
        raise last

    async def call(
        self, address: str, code: RequestCode, body: msgspec.Struct, reply: type[T]
    ) -> T:
        connection: ClientConnection = await self.pool.get(address)
        return await connection.request(code, body, reply, self.client_config.request_timeout)

    async def close_base(self) -> None:
        await self.routes.close()
        await self.pool.close()
