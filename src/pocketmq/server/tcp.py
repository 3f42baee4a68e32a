"""A TCP listener that hands each connection a :class:`ServerConnection` with a handler table.

Shared by the broker's native server and the name server: they differ only in their handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from pocketmq.server.connection import HandlerTable, ServerConnection

__all__ = ["FrameServer"]


class FrameServer:
    def __init__(
        self,
        handlers: HandlerTable,
        *,
        on_close: Callable[[ServerConnection], None] | None = None,
    ) -> None:
        self._handlers = handlers
        self._on_close_hook = on_close
        self._server: asyncio.Server | None = None
        self.connections: set[ServerConnection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, host, port, reuse_address=True
        )
        self.host, self.port = self._server.sockets[0].getsockname()[:2]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _new_connection(self) -> ServerConnection:
        connection = ServerConnection(self._handlers, self._closed, self._tasks)
        self.connections.add(connection)
        return connection

    def _closed(self, connection: ServerConnection) -> None:
        self.connections.discard(connection)
        if self._on_close_hook is not None:
            self._on_close_hook(connection)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
