"""A push consumer's membership of its group: heartbeats, the member list, leaving.

The broker knows a group's live consumers from their heartbeats (every ``heartbeat_interval``,
10 s) and tells them when the membership changes (CONSUMERS_CHANGED), so they rebalance at once
instead of at the next periodic rebalance. A closing consumer unregisters, so the others take
over its queues without waiting for its heartbeat to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping

from pocketmq.client.consumer.state import ConsumerState
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["Membership"]

log = logging.getLogger("pocketmq.client")


class Membership:
    """Registers the consumer for ``topics`` (its subscriptions, plus its retry topic when
    clustering) with the brokers of its ``subscriptions``."""

    def __init__(
        self, state: ConsumerState, topics: Mapping[str, str], subscriptions: Iterable[str]
    ) -> None:
        self._state = state
        self._topics = dict(topics)
        self._subscriptions = list(subscriptions)

    def _registration(self) -> w.HeartbeatRequest:
        state = self._state
        return w.HeartbeatRequest(
            state.client_id,
            [],
            [w.ConsumerRegistration(state.group, state.config.model.value, dict(self._topics))],
        )

    async def _addresses(self) -> set[str]:
        addresses: set[str] = set()
        for topic in self._subscriptions:
            with contextlib.suppress(PocketMQError):
                route = await self._state.client.routes.get(topic)
                addresses.update(route.addresses.values())
        return addresses

    async def heartbeat(self) -> None:
        """Heartbeat every broker of the subscribed topics; an error that retrying cannot fix
        (an unknown group) raises, others are logged."""
        request = self._registration()
        for address in await self._addresses():
            try:
                await self._state.call(address, RequestCode.HEARTBEAT, request, w.Empty)
            except PocketMQError as exc:
                if not exc.retriable:
                    raise
                log.warning("heartbeat to %s failed: %s", address, exc)

    async def heartbeat_forever(self) -> None:
        """Heartbeat every ``heartbeat_interval`` until cancelled."""
        interval = self._state.client.client_config.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(PocketMQError):
                await self.heartbeat()

    async def unregister(self) -> None:
        """Leave the group on every broker still connected (best effort)."""
        state = self._state
        request = w.UnregisterRequest(state.client_id, [state.group])
        for connection in state.client.pool.open_connections():
            with contextlib.suppress(Exception):
                await connection.request(RequestCode.UNREGISTER_CLIENT, request, w.Empty, 1.0)

    async def members(self, addresses: Iterable[str]) -> list[str]:
        """The group's live consumers, sorted the same way by every member (this one always
        included), as the first broker of ``addresses`` that answers knows them."""
        state = self._state
        members: set[str] = {state.client_id}
        for address in sorted(set(addresses)):
            try:
                reply = await state.call(
                    address,
                    RequestCode.GET_CONSUMERS,
                    w.GetConsumersRequest(state.group),
                    w.GetConsumersResponse,
                )
                members.update(reply.client_ids)
                break
            except PocketMQError as exc:
                log.debug("consumer list from %s failed: %s", address, exc)
        return sorted(members)
