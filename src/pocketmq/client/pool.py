"""Connections by address, opened on first use and reopened after a break.

Concurrent first uses of an address share one connection attempt: a task, shielded so that one
caller giving up does not cancel it for the others; its outcome is always read, whoever still
waits for it.
"""

from __future__ import annotations

import asyncio
import ssl

from pocketmq.client.connection import ClientConnection, PushHandler, close_quietly, connect

__all__ = ["ConnectionPool"]


class ConnectionPool:
    """The connections of one SDK resource, by address (see the module docstring)."""

    def __init__(
        self,
        client_id: str,
        connect_timeout: float,
        on_push: PushHandler | None = None,
        tls: ssl.SSLContext | None = None,
        credentials: tuple[str, str] = ("", ""),
    ) -> None:
        self.client_id = client_id
        self._timeout = connect_timeout
        self._tls = tls
        self._credentials = credentials
        self.on_push = on_push
        """Receives brokers' one-way requests on connections opened from now on."""
        self._connections: dict[str, ClientConnection] = {}
        self._connecting: dict[str, asyncio.Task[ClientConnection]] = {}

    def open(self, address: str) -> ClientConnection | None:
        """The open connection to ``address`` without I/O, or None (then :meth:`get` it): a
        send's hot path tries this first, as routes try their cache."""
        connection = self._connections.get(address)
        return connection if connection is not None and connection.is_open else None

    async def get(self, address: str) -> ClientConnection:
        """The open connection to ``address``, connecting (once, however many ask) if needed."""
        connection = self._connections.get(address)
        if connection is not None and connection.is_open:
            return connection
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.create_task(
                connect(
                    address,
                    self.client_id,
                    timeout=self._timeout,
                    on_push=self.on_push,
                    tls=self._tls,
                    credentials=self._credentials,
                )
            )
            self._connecting[address] = task
            task.add_done_callback(lambda done: self._settled(address, done))
        connection = await asyncio.shield(task)
        self._connections[address] = connection
        return connection

    def _settled(self, address: str, task: asyncio.Task[ClientConnection]) -> None:
        """A connection attempt ended. Its outcome is read here: every caller that awaited it
        may have been cancelled meanwhile (a consumer closing, a timeout), and the shielded
        attempt then failing (the broker went away) would otherwise be logged by asyncio as
        "Task exception was never retrieved" when the task is collected."""
        self._connecting.pop(address, None)
        if not task.cancelled():
            task.exception()

    def open_connections(self) -> list[ClientConnection]:
        """The connections still open: where a closing consumer says goodbye."""
        return [c for c in self._connections.values() if c.is_open]

    async def close(self) -> None:
        """Cancel connection attempts and close every connection."""
        for task in list(self._connecting.values()):
            task.cancel()
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await close_quietly(connection)
