"""Live producers per producer group, from heartbeats, so the broker can check transactions back.

A transaction whose producer neither committed nor rolled back is asked about ("checked back")
on a connection of *any* live producer of the same group that may publish to the half message's
topic: the producer that sent the half message may have crashed, and its siblings share its
local-transaction state (the same database). Each registration carries a channel — a callback
the protocol adapter supplies that writes a check to that producer's connection and answers
``False`` when the connection is gone — and an ``owner`` token (the adapter's connection object)
so closing a connection removes exactly its registrations, never a newer one of the same client
made on another connection.

Registrations are kept per (user, client id): with authentication on, a client id is only what a
client calls itself, so another user naming the same id gets a registration of its own and can
neither replace nor remove this one (docs/security.md, "Transactions"). A registration may carry
``may_check``, the protocol adapter's answer to "may this producer's user publish to topic T now"
(the ACL, and whether the user still exists with the secret it signed in with): a check of a
half message of topic T goes only to a producer whose ``may_check(T)`` holds, as RocketMQ 5's ACL
2.0 asks (``Pub`` on the topic).

A producer is live while it heartbeats (every 10 s) and its connection is open; after ``expiry``
seconds of silence it is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pocketmq.model.transactions import TransactionCheck

__all__ = ["CheckChannel", "MayCheck", "ProducerRegistry"]

CheckChannel = Callable[["TransactionCheck"], bool]
"""Delivers one check to a producer; ``False`` when it could not (connection closed)."""

MayCheck = Callable[[str], bool]
"""Whether a producer may be shown a half message of the given topic (its user's ``Pub``)."""


@dataclass(slots=True)
class _Producer:
    client_id: str
    user: str
    channel: CheckChannel = field(compare=False)
    owner: object = field(compare=False)
    may_check: MayCheck | None = field(compare=False)
    last_seen: float = 0.0


class ProducerRegistry:
    """Live producers of every producer group (module doc), chosen round robin for check-backs."""

    def __init__(self, expiry: float) -> None:
        self._expiry = expiry
        # group -> (user, client id) -> producer
        self._groups: dict[str, dict[tuple[str, str], _Producer]] = {}
        self._turn: dict[str, int] = {}

    def heartbeat(
        self,
        client_id: str,
        groups: Iterable[str],
        channel: CheckChannel,
        now: float,
        owner: object = None,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """Register or refresh a producer in ``groups`` with the channel its checks go through."""
        for group in groups:
            if group:
                members = self._groups.setdefault(group, {})
                producer = _Producer(client_id, user, channel, owner, may_check, now)
                members[(user, client_id)] = producer

    def unregister(
        self,
        client_id: str,
        groups: Iterable[str] | None = None,
        *,
        owner: object = None,
        user: str | None = None,
    ) -> None:
        """Forget ``client_id`` in ``groups`` (all when None); with ``owner``, only the
        registrations made through that owner (a closed connection); with ``user``, only that
        user's."""
        names = list(groups) if groups is not None else list(self._groups)
        for group in names:
            members = self._groups.get(group)
            if not members:
                continue
            for key, found in list(members.items()):
                if found.client_id != client_id or (user is not None and found.user != user):
                    continue
                if owner is None or found.owner is owner:
                    del members[key]
            if not members:
                self._groups.pop(group, None)

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Drop producers silent for longer than the expiry; returns who was dropped, for the
        log."""
        gone: list[tuple[str, str]] = []
        for group, members in list(self._groups.items()):
            for key, producer in list(members.items()):
                if producer.last_seen > now:
                    # the wall clock stepped back: count the silence from now, not from
                    # a time it reaches an hour later (docs/operations.md, clock steps)
                    producer.last_seen = now
                if now - producer.last_seen > self._expiry:
                    del members[key]
                    gone.append((group, producer.client_id))
            if not members:
                del self._groups[group]
        return gone

    def client_ids(self, group: str) -> list[str]:
        """The live producers of a group, sorted."""
        return sorted({p.client_id for p in self._groups.get(group, {}).values()})

    def groups(self) -> list[str]:
        """Every producer group with a live producer."""
        return sorted(self._groups)

    def deliver(self, group: str, check: TransactionCheck) -> str | None:
        """Hand ``check`` to one live producer of ``group`` that may see its topic (round robin);
        returns its client id, or None when no such producer could take it. Producers whose
        channel refuses (closed connection) are dropped on the way; those that may not see the
        topic are skipped and kept (their other checks may be theirs)."""
        members = self._groups.get(group)
        if not members:
            return None
        turn = self._turn.get(group, 0)
        self._turn[group] = turn + 1
        ordered = sorted(members.items())
        topic = check.message.topic
        for step in range(len(ordered)):
            key, producer = ordered[(turn + step) % len(ordered)]
            if not _may_see(producer, topic):
                continue
            try:
                delivered = producer.channel(check)
            except Exception:
                delivered = False
            if delivered:
                return producer.client_id
            members.pop(key, None)
        if not members:
            self._groups.pop(group, None)
        return None


def _may_see(producer: _Producer, topic: str) -> bool:
    """Whether ``producer`` may be shown a half message of ``topic`` (a failing check: no)."""
    if producer.may_check is None:
        return True
    try:
        return producer.may_check(topic)
    except Exception:
        return False
