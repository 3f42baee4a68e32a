"""A broker's registrations with its name server (docs/replication.md §5, §6, §9).

A registration names the broker's address, role, epoch and topics; the answer names its group's
master. The broker registers every ``register_interval`` (30 s), at once when a topic changes or
the role others see changes (a lease ran out, a fence was lifted: looked at every 0.1 s), every
``controller_lease / 6`` while it is a leased master (it tells the name server how long its
lease lasts, ``lease_ms``, so a frozen master is never listed as one past it), and every second
while it is fenced waiting for the name server's first answer. That answer lifts the fence
unless it names a newer master this broker could not verify (server/ha/roles.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from pocketmq.broker import Broker
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.ha.roles import Claim, GroupRole
from pocketmq.server.namesrv.link import NameServerLink

__all__ = ["Registrar"]

log = logging.getLogger("pocketmq.server")

ROLE_CHECK = 0.1
"""How often the loop looks whether the role others see changed (a lease ran out, a fence was
lifted): the name server hears of it within this."""


class Registrar:
    """Keeps one broker registered with its name server (module doc)."""

    def __init__(
        self,
        link: NameServerLink,
        broker: Broker,
        *,
        address: Callable[[], w.BrokerAddress],
        group: Callable[[], GroupRole | None],
        interval: float,
        renew: float,
    ) -> None:
        self._link = link
        self._broker = broker
        self._address = address  # this broker as the name server lists it, now
        self._group = group
        self._interval = interval  # the regular interval
        self._renew = renew  # a leased master's
        self._registered = ("", 0.0)  # the role last registered, and when
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Register whenever it is due (module doc), until closed."""
        self._task = asyncio.create_task(self._forever(), name="registration")

    async def close(self) -> None:
        """Stop registering."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def register(self) -> None:
        """Register now; when the answer lifts this broker's fence, register again at once as
        master (the name server lists it as one before the ready line is printed)."""
        if await self._once():
            await self._once()

    def registration(self) -> w.RegisterBrokerRequest:
        """What the broker registers now."""
        broker = self._broker
        topics = [
            w.TopicSpec(t.name, t.queues, t.topic_type.value, t.perm) for t in broker.list_topics()
        ]
        address = self._address()
        lease = broker.ha.replication.lease_remaining() if address.role == "master" else None
        # a master on a controller lease is one only until it ends: the name server is told
        # how long, so it never lists a frozen master past its lease (docs/replication.md §9)
        lease_ms = 0 if lease is None else max(1, int(lease * 1000))
        return w.RegisterBrokerRequest(address, topics, lease_ms)

    async def _once(self) -> bool:
        """One registration and what its answer says; True when the role others should see
        changed with it (the fence was lifted)."""
        registration = self.registration()
        try:
            reply = await self._link.call(
                RequestCode.REGISTER_BROKER, registration, w.RegisterBrokerResponse
            )
        except PocketMQError as exc:  # unreachable, not a member's name server, refused
            log.warning("registration with the name server failed: %s", exc)
            return False
        self._registered = (registration.broker.role, time.monotonic())
        verdict = Claim.NONE
        group = self._group()
        if group is not None:
            verdict = await group.learned(
                reply.master_address, reply.master_ha_address, reply.master_epoch
            )
        replication = self._broker.ha.replication
        if not replication.fence or verdict is Claim.UNVERIFIED:
            return False
        log.info("the name server answered: broker %s may take writes", self._broker.name)
        replication.fence = ""
        return replication.acting_role() != registration.broker.role

    def _due(self) -> bool:
        """Whether to register now: the role others see changed, a master's lease needs
        renewing at the name server, or the regular interval passed."""
        replication = self._broker.ha.replication
        role, at = self._registered
        acting = replication.acting_role()
        if acting != role:
            return True
        age = time.monotonic() - at
        if replication.fence:
            return age >= 1.0  # retried every second until the name server answers (§6)
        if acting == "master" and replication.lease_remaining() is not None:
            return age >= self._renew
        return age >= self._interval

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(ROLE_CHECK)
            if self._due():
                await self.register()
