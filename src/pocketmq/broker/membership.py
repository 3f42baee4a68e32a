"""Membership: which clients are alive, in which groups, holding which queue locks.

Consumers heartbeat their groups and subscriptions (rebalancing reads this), orderly consumers
lock the queues they consume, and producers of transactional messages register where the
broker can reach them for check-backs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pocketmq.broker.consumers import Notify
from pocketmq.broker.parts import BrokerPart
from pocketmq.broker.producers import CheckChannel, MayCheck
from pocketmq.model.clients import ClientInfo

__all__ = ["Membership"]

log = logging.getLogger("pocketmq.broker")


class Membership(BrokerPart):
    """Client registrations, queue locks and transaction check channels."""

    def heartbeat(
        self,
        client_id: str,
        consumers: Sequence[tuple[str, str, dict[str, str]]],
        notify: Notify | None = None,
        client: ClientInfo | None = None,
    ) -> None:
        """A client's consumer heartbeat: register it in each group it names, for rebalancing (an
        unknown group is refused unless ``auto_create_groups``); ``client`` says who it is."""
        now = self._clock()
        for group, model, subscriptions in consumers:
            self._group(group)
            self.consumers.heartbeat(client_id, group, model, subscriptions, now, notify, client)

    def unregister(self, client_id: str, groups: list[str] | None = None) -> None:
        """A client leaving (its named groups, or all): out of those groups and its queue locks in
        them released, so others take over at once."""
        self.consumers.unregister(client_id, groups or None)
        self.locks.release_client(client_id, groups or None)

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        """Orderly consumers: take or renew queue locks; returns the queues held."""
        self._group(group)
        return self.locks.lock(group, client_id, queues)

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[tuple[str, int]]) -> None:
        """An orderly consumer gives back queues it no longer owns after a rebalance."""
        self.locks.unlock(group, client_id, queues)

    def consumer_ids(self, group: str) -> list[str]:
        """The live members of a group, for the client's rebalance."""
        self._group(group)
        return self.consumers.client_ids(group)

    def heartbeat_producer(
        self,
        client_id: str,
        groups: Sequence[str],
        check: CheckChannel,
        owner: object = None,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """A producer of ``groups`` is live; ``check`` delivers transaction checks to it, of
        the topics ``may_check`` allows (broker/producers.py); ``user`` is who signed in."""
        self.transactions.heartbeat(client_id, groups, check, owner, user=user, may_check=may_check)

    def unregister_producer(
        self,
        client_id: str,
        groups: Sequence[str] | None = None,
        *,
        owner: object = None,
        user: str | None = None,
    ) -> None:
        """A producer leaving or its connection closed: its check-back channels go (only the
        registrations made through ``owner``, never a newer connection's; only ``user``'s)."""
        self.transactions.producers.unregister(client_id, groups, owner=owner, user=user)
