"""The group's member list in etcd: whose acknowledgements a master counts under a controller
(docs/replication.md §2 "Membership", §9).

Holding the cluster key proves a process belongs to the cluster, not that it is one of this
group's brokers. Under ``--controller`` the group's members are the brokers that say so in etcd:
each keeps ``/pocketmq/groups/<group>/members/<id>`` (its native address) under a lease of its
own — apart from the failover's lease, so it lives as long as the process, whatever its role —
and every broker reads the list each round. A master counts only the acknowledgements of slaves
in it (:meth:`Replication.set_members`) and takes consumer offsets only from them. When etcd
cannot be reached the last list is kept: what an unreachable etcd means for writes is the
failover's decision (failover.py), not this list's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from pocketmq.broker import Broker
from pocketmq.server.ha.etcd import ControllerUnavailable, Etcd, Lease
from pocketmq.server.ha.failover import ROOT, ControllerTimings

__all__ = ["GroupMembers"]

log = logging.getLogger("pocketmq.server.ha")


class GroupMembers:
    """Keeps this broker in its group's member list and the master's view of the list current."""

    def __init__(
        self,
        broker: Broker,
        etcd: Etcd,
        *,
        own_address: Callable[[], str],
        timings: ControllerTimings | None = None,
    ) -> None:
        self._broker = broker
        self._etcd = etcd
        self._own_address = own_address
        self._timings = timings or ControllerTimings()
        self._prefix = f"{ROOT}/{broker.name}/members/"
        self._lease: Lease | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        """This broker's entry."""
        return f"{self._prefix}{self._broker.config.broker_id}"

    def start(self) -> None:
        """Count nobody until etcd has answered, then keep the list current."""
        self._broker.ha.replication.set_members(frozenset())
        self._task = asyncio.create_task(self._run(), name="group-members")

    async def close(self) -> None:
        """Stop, and leave the list at once (the lease is revoked)."""
        task, self._task = self._task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.1)
        if self._lease is not None:
            with contextlib.suppress(ControllerUnavailable):
                await self._etcd.revoke(self._lease)
        await self._etcd.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
            except ControllerUnavailable:
                pass  # keep the last list; the next round retries
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the group's member list could not be read")
            await asyncio.sleep(self._timings.renew)

    async def round(self) -> frozenset[int]:
        """Renew this broker's entry (made again under a new lease if the old one expired) and
        read the list; returns it."""
        etcd = self._etcd
        if self._lease is None or not await etcd.refresh(self._lease):
            self._lease = await etcd.grant(self._timings.lease)
            await etcd.put(self.key, {"address": self._own_address()}, self._lease)
        found = await etcd.prefix(self._prefix)
        if self.key not in found:  # removed by hand while the lease lived: say so again
            await etcd.put(self.key, {"address": self._own_address()}, self._lease)
        members = frozenset(
            int(name) for name in (k.rsplit("/", 1)[1] for k in found) if name.isdigit()
        ) | {self._broker.config.broker_id}
        self._broker.ha.replication.set_members(members)
        return members
