"""What the broker remembers of the clients a gateway connection relays (docs/proxy.md).

A ``pocketmq proxy`` carries many official clients on one native connection and heartbeats each
under its own id (docs/protocol.md, "Gateways"). The connection keeps one :class:`RelayedClient`
per id, so the connection metrics count the official clients rather than the proxy, and a
gateway connection that closes takes its clients' registrations with it (they heartbeat again
through a live proxy within seconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from pocketmq.errors import TooManyRequestsError

__all__ = ["RELAYED_CLIENT_SILENCE", "RELAYED_LIMIT", "RelayedClient", "count_relayed", "remember"]


@dataclass(slots=True)
class RelayedClient:
    """One relayed client: its protocol and language, whether it produces or consumes, and when
    it was last heard of (a client not heard of for three heartbeats no longer counts)."""

    protocol: str
    language: str
    producer: bool
    consumer: bool
    seen: float = field(default_factory=time.monotonic)


RELAYED_CLIENT_SILENCE: Final = 30.0
"""A relayed client not heard of this long (three official-client heartbeats) is not counted."""


def count_relayed(
    clients: Iterable[RelayedClient],
    producers: dict[tuple[str, str], int],
    consumers: dict[tuple[str, str], int],
) -> None:
    """Add a gateway connection's live clients to the connection counts, by protocol and
    language (docs/proxy.md)."""
    now = time.monotonic()
    for client in clients:
        if now - client.seen > RELAYED_CLIENT_SILENCE:
            continue
        key = (client.protocol, client.language)
        if client.producer:
            producers[key] = producers.get(key, 0) + 1
        if client.consumer:
            consumers[key] = consumers.get(key, 0) + 1


RELAYED_LIMIT: Final = 100_000
"""The most clients one gateway connection may relay at once."""


def remember(relayed: dict[str, RelayedClient], client_id: str, client: RelayedClient) -> None:
    """Record a relayed client's heartbeat; silent ones are forgotten every 256 new ids, and a
    connection over :data:`RELAYED_LIMIT` live clients is refused (memory is not unbounded)."""
    if client_id not in relayed:
        if len(relayed) % 256 == 255:
            now = time.monotonic()
            for stale in [k for k, c in relayed.items() if now - c.seen > RELAYED_CLIENT_SILENCE]:
                del relayed[stale]
        if len(relayed) >= RELAYED_LIMIT:
            raise TooManyRequestsError(
                f"this connection relays {len(relayed)} clients already (limit {RELAYED_LIMIT})"
            )
    relayed[client_id] = client
