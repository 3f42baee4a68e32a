"""SimpleConsumer: receive a batch, process at your own pace, ack each message (pop mode).

The broker hides received messages for ``invisible_duration``; a message not acknowledged in
time is delivered again with ``delivery_attempt`` + 1, and after the group's maximum attempts it
goes to the group's dead-letter topic. ``change_invisible_duration`` hides a message longer (or
hands it back early: a nack with a delay).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence

import msgspec

from pocketmq.client.base import ClientBase, resolve_config
from pocketmq.client.config import ClientConfig
from pocketmq.client.consumer.config import normalize_subscriptions
from pocketmq.client.convert import to_view
from pocketmq.client.message import MessageView
from pocketmq.errors import (
    BrokerConnectionError,
    InvalidArgumentError,
    PocketMQError,
    ServiceUnavailableError,
    error_from_code,
)
from pocketmq.names import validate_group_name
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

_ROUTE_RETRY = 0.2
"""Seconds between route lookups while no broker of the subscribed topics answers."""

__all__ = ["SimpleConsumer"]


class SimpleConsumer(ClientBase):
    """Receives messages of ``subscriptions`` for consumer group ``group`` in pop mode: the
    application decides when to receive and acknowledges each message itself (see the module
    docstring). Use as ``async with SimpleConsumer(...)``."""

    _what = "consumer"

    def __init__(
        self,
        group: str,
        subscriptions: Mapping[str, str] | Sequence[str] | str,
        *,
        servers: Sequence[str] | str | None = None,
        client: ClientConfig | None = None,
        await_duration: float = 20.0,
    ) -> None:
        super().__init__(resolve_config(servers, client))
        if not group:
            raise InvalidArgumentError("a consumer group is required")
        validate_group_name(group)
        self.group = group
        self.subscriptions = normalize_subscriptions(subscriptions)
        if not self.subscriptions:
            raise InvalidArgumentError("subscribe to at least one topic")
        self.await_duration = await_duration
        self._turn = 0
        self._addresses: dict[str, str] = {}

    async def start(self) -> None:
        """Fetch the subscribed topics' routes (a missing topic raises here)."""
        self._check_not_closed()
        for topic in self.subscriptions:
            route = await self.routes.get(topic)
            self._addresses.update(route.addresses)
        self.routes.start()
        self._started = True

    async def aclose(self) -> None:
        """Close the connections; messages received and not acknowledged come back later."""
        self._closed = True
        await self.close_base()

    async def _targets(self) -> list[tuple[str, str, str]]:
        targets: list[tuple[str, str, str]] = []
        for topic, expression in self.subscriptions.items():
            route = await self.routes.get(topic)
            self._addresses.update(route.addresses)
            targets.extend(
                (topic, expression, address) for address in sorted(set(route.addresses.values()))
            )
        return targets

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0
    ) -> list[MessageView]:
        """Up to ``max_messages``, waiting up to ``await_duration`` when none is ready."""
        self._check_open()
        if not 1 <= max_messages <= 1024:
            raise InvalidArgumentError("max_messages must be between 1 and 1024")
        if invisible_duration <= 0:
            raise InvalidArgumentError("invisible_duration must be positive")
        invisible_ms = int(invisible_duration * 1000)
        reachable: list[tuple[str, str, str]] = []
        failure: PocketMQError | None = None
        loop = asyncio.get_running_loop()
        # when no broker answers, ask for the routes again every 0.2 s (a failover, or a name
        # server that has not yet noticed a broker die) for as long as a receive may wait
        deadline = loop.time() + max(self.await_duration, self.client_config.request_timeout)
        for round_number in itertools.count():
            if round_number:
                await asyncio.sleep(_ROUTE_RETRY)
            targets = await self._targets()
            self._turn += 1
            turn = self._turn % len(targets)
            for topic, expression, address in targets[turn:] + targets[:turn]:
                try:  # first: anything ready anywhere?
                    found = await self._pop(address, topic, expression, max_messages, invisible_ms)
                except (BrokerConnectionError, ServiceUnavailableError) as exc:
                    # the broker is gone, or a slave whose master is back: the route changed
                    self.routes.invalidate(topic)
                    failure = exc
                    continue
                if found:
                    return found
                reachable.append((topic, expression, address))
            if reachable or loop.time() >= deadline:
                break
        if not reachable:
            assert failure is not None
            raise failure
        topic, expression, address = reachable[0]
        wait_ms = int(self.await_duration * 1000)
        return await self._pop(address, topic, expression, max_messages, invisible_ms, wait_ms)

    async def _pop(
        self,
        address: str,
        topic: str,
        expression: str,
        count: int,
        invisible_ms: int,
        wait_ms: int = 0,
    ) -> list[MessageView]:
        connection = await self.pool.get(address)
        reply = await connection.request(
            RequestCode.POP,
            w.PopRequest(
                self.group, topic, count, invisible_ms, wait_ms, expression, -1, self.pool.client_id
            ),
            w.PopResponse,
            self.client_config.request_timeout + wait_ms / 1000,
        )
        return [to_view(m) for m in reply.messages]

    def _address(self, message: MessageView) -> str:
        if not message.receipt_handle:
            raise InvalidArgumentError("this message was not received by a SimpleConsumer")
        address = self._addresses.get(message.broker_name)
        if address is None:
            raise InvalidArgumentError(f"unknown broker {message.broker_name!r}")
        return address

    async def ack(self, message: MessageView) -> None:
        """Acknowledge one message; raises if its receipt handle is stale or unknown."""
        await self.ack_many([message])

    async def ack_many(self, messages: Sequence[MessageView]) -> None:
        """Acknowledge messages in one request per broker."""
        by_address: dict[str, list[MessageView]] = {}
        for message in messages:
            by_address.setdefault(self._address(message), []).append(message)
        replies = await asyncio.gather(
            *(
                self._call(
                    address,
                    RequestCode.ACK,
                    w.AckRequest(
                        self.group,
                        [w.AckEntry(m.topic, m.receipt_handle or "") for m in batch],
                        self.pool.client_id,
                    ),
                    w.AckResponse,
                )
                for address, batch in by_address.items()
            )
        )
        for reply in replies:
            for code, remark in zip(
                reply.codes, reply.remarks or [""] * len(reply.codes), strict=False
            ):
                if code != 0:
                    raise error_from_code(code, remark)

    async def change_invisible_duration(self, message: MessageView, seconds: float) -> MessageView:
        """Hide ``message`` for ``seconds`` from now; returns it with its new receipt handle."""
        if seconds < 0:
            raise InvalidArgumentError("invisible duration must not be negative")
        reply = await self._call(
            self._address(message),
            RequestCode.CHANGE_INVISIBLE,
            w.ChangeInvisibleRequest(
                self.group, message.topic, message.receipt_handle or "", int(seconds * 1000)
            ),
            w.ChangeInvisibleResponse,
        )
        return msgspec.structs.replace(message, receipt_handle=reply.receipt_handle)
