"""A listening port's remoting side: the handler table its remoting connections dispatch to,
who may sign their requests, and the connections it serves (docs/remoting.md, "Where it
listens").

The process that composes the servers gives one to the port's listener
(``FrameServer(..., remoting=RemotingPort(...))``): the listener sniffs each new connection and
asks the port for a :class:`RemotingConnection` when the first bytes are RocketMQ's. The name
server's port serves the name-server requests (``server/namesrv/remoting.py``); the broker's
port the broker's (``server/remoting/consume.py``, the consumer side).
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.server.listening import PortShare
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.signatures import SignatureCheck

__all__ = ["RemotingPort"]


class RemotingPort:
    """The remoting side of one port (module doc). ``signatures``: every request must be signed
    by a known user (the port has authentication on). ``on_close`` is told of each connection
    that goes (to drop what its clients registered)."""

    def __init__(
        self,
        handlers: RemotingHandlerTable,
        *,
        signatures: SignatureCheck | None = None,
        on_close: Callable[[RemotingConnection], None] | None = None,
    ) -> None:
        self.handlers = handlers
        self.signatures = signatures
        self._on_close_hook = on_close
        self.connections: set[RemotingConnection] = set()

    def connection(self, share: PortShare, opened_at: float) -> RemotingConnection:
        """A connection for a client the listener sniffed as remoting (``SecondProtocol``)."""
        connection = RemotingConnection(
            self.handlers,
            share,
            signatures=self.signatures,
            opened_at=opened_at,
            on_close=self._closed,
        )
        self.connections.add(connection)
        return connection

    def _closed(self, connection: RemotingConnection) -> None:
        self.connections.discard(connection)
        if self._on_close_hook is not None:
            self._on_close_hook(connection)
