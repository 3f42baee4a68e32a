"""Live consumers per group, from heartbeats, so clients can share a group's queues.

A consumer is live while it heartbeats (every 10 s) and its connection is open; after
``expiry`` seconds of silence it is dropped. Whenever a group's membership changes, the remaining
members are told (a callback the server turns into a CONSUMERS_CHANGED frame) so they rebalance
at once instead of waiting for their next periodic rebalance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.model.clients import ClientInfo

__all__ = ["ConsumerRegistry", "Registration"]

Notify = Callable[[str], None]


@dataclass(slots=True)
class Registration:
    """One live member of a consumer group: what it subscribed to, when it was last heard, and how
    to tell it that the group changed."""

    client_id: str
    model: str
    subscriptions: dict[str, str]
    last_seen: float
    notify: Notify | None = field(default=None, compare=False)
    client: ClientInfo = field(default_factory=ClientInfo, compare=False)


class ConsumerRegistry:
    """The live members of every consumer group (module doc): what push consumers divide a group's
    queues by."""

    def __init__(self, expiry: float) -> None:
        self._expiry = expiry
        self._groups: dict[str, dict[str, Registration]] = {}

    def heartbeat(
        self,
        client_id: str,
        group: str,
        model: str,
        subscriptions: dict[str, str],
        now: float,
        notify: Notify | None,
        client: ClientInfo | None = None,
    ) -> None:
        """Register or refresh a member; a new member, or one whose subscriptions changed, makes the
        group rebalance."""
        members = self._groups.setdefault(group, {})
        existing = members.get(client_id)
        members[client_id] = Registration(
            client_id, model, subscriptions, now, notify, client or ClientInfo()
        )
        if existing is None:
            self._changed(group, except_client=client_id)

    def unregister(self, client_id: str, groups: list[str] | None = None) -> None:
        """Remove a client from its groups (all, or the named ones) at once, so its queues move
        without waiting for the expiry."""
        for group in list(groups if groups is not None else self._groups):
            members = self._groups.get(group)
            if members and members.pop(client_id, None) is not None:
                self._changed(group)

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Drop members silent for longer than the expiry and tell their groups; returns who was
        dropped, for the log."""
        gone: list[tuple[str, str]] = []
        for group, members in self._groups.items():
            for client_id, registration in list(members.items()):
                if registration.last_seen > now:
                    # the wall clock stepped back: count the silence from now, not from
                    # a time it reaches an hour later (docs/operations.md, clock steps)
                    registration.last_seen = now
                if now - registration.last_seen > self._expiry:
                    del members[client_id]
                    gone.append((group, client_id))
        for group in {g for g, _ in gone}:
            self._changed(group)
        return gone

    def client_ids(self, group: str) -> list[str]:
        """A group's members, sorted, so every member computes the same division of the queues."""
        return sorted(self._groups.get(group, {}))

    def members(self, group: str) -> list[Registration]:
        """A group's live members with what they told about themselves, by client id."""
        return sorted(self._groups.get(group, {}).values(), key=lambda r: r.client_id)

    def _changed(self, group: str, except_client: str | None = None) -> None:
        for registration in list(self._groups.get(group, {}).values()):
            if registration.client_id != except_client and registration.notify is not None:
                registration.notify(group)
