"""Connections by address, opened on first use and reopened after a break.

Concurrent first uses of an address share one connection attempt.
"""

from __future__ import annotations

import asyncio

from pocketmq.client.connection import ClientConnection, PushHandler, close_quietly, connect

__all__ = ["ConnectionPool"]


class ConnectionPool:
    def __init__(
        self, client_id: str, connect_timeout: float, on_push: PushHandler | None = None
    ) -> None:
        self.client_id = client_id
        self._timeout = connect_timeout
        self._on_push = on_push
        self._connections: dict[str, ClientConnection] = {}
        self._connecting: dict[str, asyncio.Task[ClientConnection]] = {}

    async def get(self, address: str) -> ClientConnection:
        connection = self._connections.get(address)
        if connection is not None and connection.is_open:
            return connection
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.create_task(
                connect(address, self.client_id, timeout=self._timeout, on_push=self._on_push)
            )
            self._connecting[address] = task
            task.add_done_callback(lambda _: self._connecting.pop(address, None))
        connection = await asyncio.shield(task)
        self._connections[address] = connection
        return connection

    def open_connections(self) -> list[ClientConnection]:
        return [c for c in self._connections.values() if c.is_open]

    async def close(self) -> None:
        for task in list(self._connecting.values()):
            task.cancel()
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await close_quietly(connection)
