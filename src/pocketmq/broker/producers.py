"""Live producers per producer group, from heartbeats, so the broker can check transactions back.

A transaction whose producer neither committed nor rolled back is asked about ("checked back")
on a connection of *any* live producer of the same group: the producer that sent the half message
may have crashed, and its siblings share its local-transaction state (the same database). Each
registration carries a channel — a callback the protocol adapter supplies that writes a check to
that producer's connection and answers ``False`` when the connection is gone — and an ``owner``
token (the adapter's connection object) so closing a connection removes exactly its
registrations, never a newer one of the same client made on another connection.

A producer is live while it heartbeats (every 10 s) and its connection is open; after ``expiry``
seconds of silence it is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pocketmq.broker.transactions import TransactionCheck

__all__ = ["CheckChannel", "ProducerRegistry"]

CheckChannel = Callable[["TransactionCheck"], bool]
"""Delivers one check to a producer; ``False`` when it could not (connection closed)."""


@dataclass(slots=True)
class _Producer:
    client_id: str
    channel: CheckChannel = field(compare=False)
    owner: object = field(compare=False)
    last_seen: float = 0.0


class ProducerRegistry:
    """Live producers of every producer group (module doc), chosen round robin for check-backs."""

    def __init__(self, expiry: float) -> None:
        self._expiry = expiry
        self._groups: dict[str, dict[str, _Producer]] = {}
        self._turn: dict[str, int] = {}

    def heartbeat(
        self,
        client_id: str,
        groups: Iterable[str],
        channel: CheckChannel,
        now: float,
        owner: object = None,
    ) -> None:
        """Register or refresh a producer in ``groups`` with the channel its checks go through."""
        for group in groups:
            if group:
                members = self._groups.setdefault(group, {})
                members[client_id] = _Producer(client_id, channel, owner, now)

    def unregister(
        self, client_id: str, groups: Iterable[str] | None = None, *, owner: object = None
    ) -> None:
        """Forget ``client_id`` in ``groups`` (all when None); with ``owner``, only the
        registrations made through that owner (a closed connection)."""
        names = list(groups) if groups is not None else list(self._groups)
        for group in names:
            members = self._groups.get(group)
            if not members:
                continue
            found = members.get(client_id)
            if found is not None and (owner is None or found.owner is owner):
                del members[client_id]
            if not members:
                self._groups.pop(group, None)

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Drop producers silent for longer than the expiry; returns who was dropped, for the
        log."""
        gone: list[tuple[str, str]] = []
        for group, members in list(self._groups.items()):
            for client_id, producer in list(members.items()):
                if producer.last_seen > now:
                    # the wall clock stepped back: count the silence from now, not from
                    # a time it reaches an hour later (docs/operations.md, clock steps)
                    producer.last_seen = now
                if now - producer.last_seen > self._expiry:
                    del members[client_id]
                    gone.append((group, client_id))
            if not members:
                del self._groups[group]
        return gone

    def client_ids(self, group: str) -> list[str]:
        """The live producers of a group, sorted."""
        return sorted(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        """Every producer group with a live producer."""
        return sorted(self._groups)

    def deliver(self, group: str, check: TransactionCheck) -> str | None:
        """Hand ``check`` to one live producer of ``group`` (round robin); returns its client id,
        or None when no producer of the group could take it. Producers whose channel refuses
        (closed connection) are dropped on the way."""
        members = self._groups.get(group)
        if not members:
            return None
        turn = self._turn.get(group, 0)
        self._turn[group] = turn + 1
        ordered = sorted(members.values(), key=lambda p: p.client_id)
        for step in range(len(ordered)):
            producer = ordered[(turn + step) % len(ordered)]
            try:
                delivered = producer.channel(check)
            except Exception:
                delivered = False
            if delivered:
                return producer.client_id
            members.pop(producer.client_id, None)
        if not members:
            self._groups.pop(group, None)
        return None
