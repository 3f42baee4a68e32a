"""The sends of many gRPC calls reach the store as one append, whichever port serves them.

An official client sends one message (or a few) per ``SendMessage`` call, and a store append costs
mostly per append, not per message. Both ports — the broker in process (:class:`~pocketmq.server.
grpc.port.LocalPort`) and the proxy's native connection (pocketmq/proxy/remote.py) — therefore
send through one :class:`SendMerger`: while one merged send is being stored, the calls that
arrive meanwhile wait and leave together in the next, across clients, producer groups and born
hosts (each call stays a :class:`~pocketmq.model.SendBatch` of its own inside it, so its producer
group and born host are its own). The merge is :class:`pocketmq.batching.Batcher`'s; the port's
``send_many`` is the one path the merged batches take to the store, as a native read's sends take
``Broker.send_now_many`` (docs/design.md, "Sending").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from pocketmq.batching import Batcher
from pocketmq.model import InboundMessage, SendBatch, SendOutcome

__all__ = ["MAX_MERGED_BYTES", "MAX_MERGED_SENDS", "SendMany", "SendMerger"]

MAX_MERGED_SENDS: Final = 256
"""Calls merged into one send at most."""

MAX_MERGED_BYTES: Final = 8 * 1024 * 1024
"""About this many bytes of messages merged into one send at most (half a native frame, so one
call's request always fits; one call's messages always go whole)."""

SendMany = Callable[[list[SendBatch]], Awaitable[Sequence[list[SendOutcome] | Exception]]]
"""A port's one path to the store: the batches stored together, each answered with its outcomes
or the error that refused it whole."""


class SendMerger:
    """Merges concurrent sends into one ``send_many`` (module doc); ``observe`` hears how many
    messages each merged send carried (the proxy's ``pocketmq_proxy_batch_size``)."""

    def __init__(
        self, send_many: SendMany, *, observe: Callable[[int], None] | None = None
    ) -> None:
        self._send_many = send_many
        self._observe = observe
        self._batcher: Batcher[SendBatch, list[SendOutcome] | Exception] = Batcher(
            self._run, MAX_MERGED_SENDS, max_bytes=MAX_MERGED_BYTES, size=_batch_size
        )

    async def send(
        self, messages: list[InboundMessage], producer_group: str, born_host: str
    ) -> list[SendOutcome]:
        """Store ``messages`` in the next merged send; one outcome per message, or the error that
        refused them."""
        [answer] = await self._batcher.submit([SendBatch(messages, producer_group, born_host)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def _run(self, batches: list[SendBatch]) -> list[list[SendOutcome] | Exception]:
        if self._observe is not None:
            self._observe(sum(len(batch.messages) for batch in batches))
        return list(await self._send_many(batches))


def _batch_size(batch: SendBatch) -> int:
    """What a call's messages add to a SEND frame, roughly (bodies, properties, fixed fields)."""
    return sum(
        len(m.body) + sum(len(k) + len(v) for k, v in m.properties.items()) + 64
        for m in batch.messages
    )
