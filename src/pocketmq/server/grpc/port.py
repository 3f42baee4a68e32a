"""What the gRPC adapter asks of a broker, as one asynchronous interface.

The adapter (server/grpc/service.py) translates each v2 RPC into calls of a :class:`BrokerPort`.
Two implementations exist: :class:`LocalPort`, the broker core in the same process (the default
``pocketmq serve``), and the proxy's remote port, the same calls over the native protocol to a
broker in another process (pocketmq/proxy, docs/proxy.md). Keeping the adapter ignorant of which
one it talks to is what lets both run the very same RPC code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pocketmq.broker import (
    Broker,
    ClientInfo,
    Delivered,
    GroupConfig,
    InboundMessage,
    PullOutcome,
    SendOutcome,
    TransactionCheck,
)
from pocketmq.protocol import structs as w
from pocketmq.server.native.paging import pop_byte_budget

__all__ = ["BrokerLimits", "BrokerPort", "CheckChannel", "LocalPort", "MayCheck"]

CheckChannel = Callable[[TransactionCheck], bool]
"""Delivers a transaction check to one official producer; False when it cannot (gone)."""

MayCheck = Callable[[str], bool]
"""Whether an official producer may be shown a half message of a topic (its user's ``Pub``)."""


@dataclass(frozen=True, slots=True)
class BrokerLimits:
    """The broker settings a v2 answer depends on (sizes in Settings, retry backoff, the longest
    long poll), so a gateway answers exactly as the broker's own adapter would."""

    max_message_size: int
    max_properties_size: int
    delay_levels: tuple[float, ...]
    max_long_poll: float


class BrokerPort(Protocol):
    """The broker operations behind the v2 RPCs (module doc). Errors are the broker's typed
    errors (pocketmq.errors), whichever side raised them."""

    name: str
    limits: BrokerLimits

    async def route(self, topic: str) -> w.RouteResponse:
        """The topic's route across the cluster, as the adapter lists it to official clients."""
        ...

    async def topic_perm(self, topic: str) -> int | None:
        """The topic's permission here (None: no such topic), for the masterless-write rule."""
        ...

    async def group(self, name: str) -> GroupConfig:
        """The group's configuration (created on first use if the broker auto-creates groups)."""
        ...

    async def heartbeat_consumer(
        self, client_id: str, group: str, subscriptions: dict[str, str], client: ClientInfo
    ) -> None:
        """Register an official consumer in its group, described as the client it is."""
        ...

    async def register_producer(
        self,
        client_id: str,
        topics: Sequence[str],
        check: CheckChannel,
        owner: object,
        client: ClientInfo,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """Keep an official producer's check-back channel for its topics (its producer groups),
        as ``user``'s, for the checks ``may_check`` allows (broker/producers.py)."""
        ...

    async def unregister(self, client_id: str, group: str, owner: object) -> None:
        """A client leaving: out of its group (none: of no consumer group) and the check-back
        channels ``owner`` registered dropped at once."""
        ...

    async def send(
        self, messages: list[InboundMessage], producer_group: str, born_host: str
    ) -> list[SendOutcome]:
        """Store messages through the broker's send path; one outcome per message."""
        ...

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message by its recall handle; its message id."""
        ...

    async def end_transaction(
        self,
        topic: str,
        message_id: str,
        transaction_id: str,
        *,
        commit: bool,
        from_check: bool,
        by: str = "",
    ) -> None:
        """Commit or roll back a half message (the topic stands for the producer group);
        ``by``: the signed-in user, recorded with the outcome."""
        ...

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int,
        invisible: float,
        max_wait: float,
        expression: str,
        consumer: str,
        queue_hint: int,
        attempt_id: str,
    ) -> list[Delivered]:
        """Pop messages with receipt handles, long-polling up to ``max_wait``."""
        ...

    async def ack(self, group: str, entries: Sequence[tuple[str, str]]) -> list[Exception | None]:
        """Acknowledge popped messages; per entry None or the error it met."""
        ...

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible: float
    ) -> str:
        """Hide a popped message again for ``invisible`` seconds; its new receipt handle."""
        ...

    async def forward_to_dead_letter(
        self, group: str, topic: str, receipt_handle: str, reason: str
    ) -> None:
        """Move a popped message to its group's dead-letter queue now."""
        ...

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int,
        expression: str,
        max_wait: float,
    ) -> PullOutcome:
        """Pull mode: messages of one queue from ``offset``."""
        ...

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a group's offset in one queue."""
        ...

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """A group's committed offset in one queue (-1: none)."""
        ...

    async def queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """A queue's first and next offsets, or None when the topic has no such queue."""
        ...


class LocalPort:
    """:class:`BrokerPort` over the broker core in this process: each call is the broker's own
    method, so the one-process broker pays nothing for the indirection but a coroutine."""

    def __init__(self, broker: Broker, routes: Callable[[str], Awaitable[w.RouteResponse]]) -> None:
        self._broker = broker
        self._routes = routes
        self.name = broker.name
        config = broker.config
        self.limits = BrokerLimits(
            config.store.max_message_size,
            config.store.max_properties_size,
            tuple(config.delay_levels),
            config.max_long_poll,
        )
        # one receive holds what it hands out in memory: as much as a native pop answers
        self._pop_bytes = pop_byte_budget(
            config.store.max_message_size, config.store.max_properties_size
        )

    async def route(self, topic: str) -> w.RouteResponse:
        """The broker's own :meth:`BrokerPort.route`."""
        return await self._routes(topic)

    async def topic_perm(self, topic: str) -> int | None:
        """The broker's own :meth:`BrokerPort.topic_perm`."""
        config = self._broker.topic(topic)
        return config.perm if config is not None else None

    async def group(self, name: str) -> GroupConfig:
        """The broker's own :meth:`BrokerPort.group`."""
        return self._broker.require_group(name)

    async def heartbeat_consumer(
        self, client_id: str, group: str, subscriptions: dict[str, str], client: ClientInfo
    ) -> None:
        """The broker's own :meth:`BrokerPort.heartbeat_consumer`."""
        self._broker.heartbeat(client_id, [(group, "clustering", subscriptions)], None, client)

    async def register_producer(
        self,
        client_id: str,
        topics: Sequence[str],
        check: CheckChannel,
        owner: object,
        client: ClientInfo,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """The broker's own :meth:`BrokerPort.register_producer`."""
        self._broker.heartbeat_producer(
            client_id, topics, check, owner=owner, user=user, may_check=may_check
        )

    async def unregister(self, client_id: str, group: str, owner: object) -> None:
        """The broker's own :meth:`BrokerPort.unregister`."""
        if group:
            self._broker.unregister(client_id, [group])
        if owner is not None:  # only what this client's session registered
            self._broker.unregister_producer(client_id, owner=owner)

    async def send(
        self, messages: list[InboundMessage], producer_group: str, born_host: str
    ) -> list[SendOutcome]:
        """The broker's own :meth:`BrokerPort.send`."""
        return await self._broker.send(messages, producer_group=producer_group, born_host=born_host)

    async def recall(self, topic: str, recall_handle: str) -> str:
        """The broker's own :meth:`BrokerPort.recall`."""
        return self._broker.recall(topic, recall_handle)

    async def end_transaction(
        self,
        topic: str,
        message_id: str,
        transaction_id: str,
        *,
        commit: bool,
        from_check: bool,
        by: str = "",
    ) -> None:
        """The broker's own :meth:`BrokerPort.end_transaction`."""
        await self._broker.end_transaction(
            topic,
            message_id,
            transaction_id,
            commit=commit,
            from_check=from_check,
            topic=topic,
            by=by,
        )

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int,
        invisible: float,
        max_wait: float,
        expression: str,
        consumer: str,
        queue_hint: int,
        attempt_id: str,
    ) -> list[Delivered]:
        """The broker's own :meth:`BrokerPort.pop`."""
        return await self._broker.pop(
            group,
            topic,
            max_count=max_count,
            invisible=invisible,
            max_wait=max_wait,
            expression=expression,
            consumer=consumer,
            queue_hint=queue_hint,
            max_bytes=self._pop_bytes,
            attempt_id=attempt_id,
        )

    async def ack(self, group: str, entries: Sequence[tuple[str, str]]) -> list[Exception | None]:
        """The broker's own :meth:`BrokerPort.ack`."""
        results: list[Exception | None] = []
        for topic, handle in entries:
            try:
                self._broker.ack(group, topic, handle)
                results.append(None)
            except Exception as exc:  # each entry succeeds or fails on its own
                results.append(exc)
        return results

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible: float
    ) -> str:
        """The broker's own :meth:`BrokerPort.change_invisible`."""
        return self._broker.change_invisible(group, topic, receipt_handle, invisible)

    async def forward_to_dead_letter(
        self, group: str, topic: str, receipt_handle: str, reason: str
    ) -> None:
        """The broker's own :meth:`BrokerPort.forward_to_dead_letter`."""
        self._broker.forward_to_dead_letter(group, topic, receipt_handle, reason=reason)

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int,
        expression: str,
        max_wait: float,
    ) -> PullOutcome:
        """The broker's own :meth:`BrokerPort.pull`."""
        return await self._broker.pull(
            group,
            topic,
            queue_id,
            offset,
            max_count=max_count,
            expression=expression,
            max_wait=max_wait,
        )

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The broker's own :meth:`BrokerPort.commit_offset`."""
        self._broker.commit_offsets(group, [(topic, queue_id, offset)])

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The broker's own :meth:`BrokerPort.query_offset`."""
        return self._broker.query_offset(group, topic, queue_id)

    async def queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """The broker's own :meth:`BrokerPort.queue_range`."""
        for row in self._broker.queue_status(topic):
            if row[0] == queue_id:
                return row[1], row[2]
        return None
