"""What the gRPC adapter asks of a broker, as one asynchronous interface.

The adapter (server/grpc/service.py) translates each v2 RPC into calls of a :class:`BrokerPort`.
Two implementations exist: :class:`LocalPort`, the broker core in the same process (the default
``pocketmq serve``), and the proxy's remote port, the same calls over the native protocol to a
broker in another process (pocketmq/proxy, docs/proxy.md). Keeping the adapter ignorant of which
one it talks to is what lets both run the very same RPC code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pocketmq.broker import Broker
from pocketmq.model import (
    ClientInfo,
    Delivered,
    GroupConfig,
    InboundMessage,
    PullOutcome,
    SendBatch,
    SendOutcome,
    TransactionCheck,
)
from pocketmq.protocol import structs as w
from pocketmq.protocol.paging import pop_byte_budget
from pocketmq.server.grpc.merging import SendMerger

__all__ = [
    "BrokerLimits",
    "BrokerPort",
    "CheckChannel",
    "LocalPort",
    "MayCheck",
    "official_producer_group",
]

CheckChannel = Callable[[TransactionCheck], bool]
"""Delivers a transaction check to one official producer; False when it cannot (gone)."""

MayCheck = Callable[[str], bool]
"""Whether an official producer may be shown a half message of a topic (its user's ``Pub``)."""


def official_producer_group(topic: str) -> str:
    """The producer group of an official (v2) producer's half messages of ``topic``: it declares
    none, so, as RocketMQ's proxy does, the topic stands for it — in the sends, the ends of its
    transactions and the topics it registers for checks alike (docs/transactions.md, "8. For
    protocol adapters")."""
    return topic


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
        """Store messages through the broker's send path, merged with the sends of other calls
        (server/grpc/merging.py); one outcome per message."""
        ...

    async def send_many(self, batches: list[SendBatch]) -> list[list[SendOutcome] | Exception]:
        """Store several calls' batches in one append; each batch's outcomes, or the error that
        refused it whole (the merged sends' one path to the store)."""
        ...

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message by its recall handle; its message id."""
        ...

    async def end_transaction(
        self,
        producer_group: str,
        topic: str,
        message_id: str,
        transaction_id: str,
        *,
        commit: bool,
        from_check: bool,
        by: str = "",
    ) -> None:
        """Commit or roll back a half message of ``producer_group`` and ``topic``; ``by``: the
        signed-in user, recorded with the outcome."""
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
        self._sends = SendMerger(self.send_many)  # concurrent calls: one append

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
        """:meth:`BrokerPort.send`: when sends wait after their append (sync flush, a ``sync``
        slave), the calls arriving meanwhile merged into one :meth:`send_many`; otherwise each
        call's own append at once — an append that never suspends leaves nothing to merge but
        calls of the same loop turn, and merging those cost more than it saved (measured:
        docs/benchmarks.md, "Issue 30's reshape against the tree before it")."""
        if self._broker.sends_wait():
            return await self._sends.send(messages, producer_group, born_host)
        [answer] = await self.send_many([SendBatch(messages, producer_group, born_host)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def send_many(self, batches: list[SendBatch]) -> list[list[SendOutcome] | Exception]:
        """The broker's own send of several batches in one append (``Broker.send_now_many``, as
        a native read's sends), each settled (sync flush, sync slave) before it is answered."""
        answers = self._broker.send_now_many(batches)
        if all(isinstance(a, Exception) or not a[1] for a in answers):
            return [a if isinstance(a, Exception) else a[0] for a in answers]
        return list(await asyncio.gather(*(self._settle(a) for a in answers)))

    async def _settle(
        self, answer: tuple[list[SendOutcome], int] | Exception
    ) -> list[SendOutcome] | Exception:
        if isinstance(answer, Exception):
            return answer
        outcomes, end = answer
        return await self._broker.settle(outcomes, end) if end else outcomes

    async def recall(self, topic: str, recall_handle: str) -> str:
        """The broker's own :meth:`BrokerPort.recall`."""
        return self._broker.recall(topic, recall_handle)

    async def end_transaction(
        self,
        producer_group: str,
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
            producer_group,
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
