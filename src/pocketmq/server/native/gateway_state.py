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

__all__ = ["RELAYED_CLIENT_SILENCE", "RelayedClient", "count_relayed"]


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
