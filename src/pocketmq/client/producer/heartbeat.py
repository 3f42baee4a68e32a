"""Producer-group heartbeats: how a broker finds a producer to check a transaction with.

A broker checks an unfinished transaction back with any live producer of its producer group
whose user may publish to the message's topic (docs/transactions.md §4), so a transaction
producer heartbeats its group, and the topics it publishes to, to every broker of its topics: at
start for the topics it was given, every heartbeat interval, at once on a connection it has not
heartbeated on yet (a reconnect, a new broker), and before a half message goes out on such a
connection. On close it unregisters, so checks go to a sibling at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Final

from pocketmq.client.base import ClientBase
from pocketmq.client.connection import ClientConnection
from pocketmq.client.routes import QueueRef
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["GroupHeartbeat"]

log = logging.getLogger("pocketmq.client")

_RECONNECT_CHECK: Final = 1.0  # how often the loop looks for connections not heartbeated yet


class GroupHeartbeat:
    """Keeps ``group`` registered as a producer group on the brokers of ``topics``."""

    def __init__(self, client: ClientBase, group: str, topics: Iterable[str]) -> None:
        self._client = client
        self.group = group
        self.topics: set[str] = set(topics)
        self._heartbeated: dict[str, ClientConnection] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Fetch the routes of the topics, heartbeat every broker, then keep heartbeating.
        Raises if a topic has no route (a misspelt topic should fail at start)."""
        for topic in sorted(self.topics):
            await self._client.routes.get(topic)
        await self.beat_all(force=True)
        self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        """Stop heartbeating."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def unregister(self) -> None:
        """Tell every broker still connected that this producer is gone: checks go to a
        sibling at once instead of to a closed connection."""
        request = w.UnregisterRequest(self._client.pool.client_id, [self.group])
        for connection in list(self._heartbeated.values()):
            if connection.is_open:
                with contextlib.suppress(PocketMQError):
                    await connection.request(RequestCode.UNREGISTER_CLIENT, request, w.Empty, 1.0)

    async def ensure(self, queue: QueueRef, connection: ClientConnection) -> None:
        """Heartbeat on ``connection`` unless done already: run before a half message leaves,
        so the broker can check the transaction back."""
        if self._heartbeated.get(queue.address) is not connection:
            await self._beat(queue.address, connection)

    async def beat_all(self, *, force: bool) -> None:
        """Heartbeat every broker of the topics (``force``), or only those whose connection
        has not been heartbeated yet. A broker that is down is tried again by the loop."""
        addresses: set[str] = set()
        for topic in sorted(self.topics):
            with contextlib.suppress(PocketMQError):
                addresses.update((await self._client.routes.get(topic)).addresses.values())
        for address in sorted(addresses):
            try:
                connection = await self._client.pool.get(address)
            except PocketMQError:
                continue
            if force or self._heartbeated.get(address) is not connection:
                with contextlib.suppress(PocketMQError):
                    await self._beat(address, connection)

    async def _beat(self, address: str, connection: ClientConnection) -> None:
        # the topics go along: with authorization the broker checks Pub on each (security.md)
        request = w.HeartbeatRequest(
            self._client.pool.client_id, [self.group], [], producer_topics=sorted(self.topics)
        )
        await connection.request(
            RequestCode.HEARTBEAT, request, w.Empty, self._client.client_config.request_timeout
        )
        self._heartbeated[address] = connection

    async def _forever(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._client.client_config.heartbeat_interval
        last_full = loop.time()
        while True:
            await asyncio.sleep(min(interval, _RECONNECT_CHECK))
            full = loop.time() - last_full >= interval
            if full:
                last_full = loop.time()
            try:
                await self.beat_all(force=full)
            except Exception:  # keep heartbeating whatever one round hit
                log.exception("transaction producer heartbeat failed")
