"""A broker process's part in its group: serve slaves as master, follow the master as slave, and
switch between the two (docs/replication.md §6).

A master listens on its replication port; a slave runs one link to its master, whose replication
address comes from ``--master`` or from the name server. A promotion turns a slave into the
master (a new epoch); a master that learns from the name server that its group has a master with
a newer epoch steps down and follows it, which cuts what its log has beyond their shared history.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

from pocketmq.broker import Broker
from pocketmq.broker.replication import Role
from pocketmq.errors import PreconditionFailedError
from pocketmq.server.ha.handshake import LinkPolicy
from pocketmq.server.ha.master import HaServer
from pocketmq.server.ha.slave import HaClient

__all__ = ["GroupRole"]

log = logging.getLogger("pocketmq.server.ha")


class GroupRole:
    """Runs the replication side that matches the broker's role."""

    def __init__(
        self,
        broker: Broker,
        *,
        host: str,
        ha_port: int,
        ha_port_fixed: bool = True,
        master: str | None,
        own_address: Callable[[], str],
        advertise: Callable[[str, int], str],
        on_change: Callable[[], Awaitable[None]],
        tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None] = (None, None),
        policy: LinkPolicy | None = None,
    ) -> None:
        self._broker = broker
        self.policy = policy or LinkPolicy()  # the cluster key and the links' limits
        # (what the replication port serves with, what a slave connects with): docs/security.md
        self._tls_server, self._tls_client = tls
        self._host = host
        self._ha_port = ha_port
        self._ha_port_fixed = ha_port_fixed
        self._configured_master = master
        self._discovered_master = ""
        self._own_address = own_address
        self._advertise = advertise
        self._on_change = on_change
        self.server: HaServer | None = None
        self.client: HaClient | None = None

    @property
    def ha_address(self) -> str:
        """Where this broker's slaves connect ("" while it is a slave)."""
        if self.server is None:
            return ""
        return self._advertise(self._host, self.server.port)

    async def start(self) -> None:
        """Serve slaves (a master) or start following the master (a slave)."""
        if self._broker.role is Role.MASTER:
            self._broker.replica_log.ensure_identity()
            await self._serve()
        else:
            self._follow()

    async def _serve(self) -> None:
        server = HaServer(self._broker, tls=self._tls_server, policy=self.policy)
        try:
            await server.start(self._host, self._ha_port)
        except OSError as exc:
            if self._ha_port_fixed or not self._ha_port:
                raise
            # the conventional port (native + 1) is taken: any port will do, the name server
            # tells the slaves where it is
            log.warning("replication port %d: %s; using a free port", self._ha_port, exc)
            await server.start(self._host, 0)
        self.server = server
        log.info("replication port %s", self.ha_address)

    def _follow(self) -> None:
        client = HaClient(
            self._broker,
            self._master_address,
            self._own_address,
            metadata_interval=self._broker.config.ha_metadata_interval,
            topics_changed=self._on_change,
            link_lost=self._on_change,
            tls=self._tls_client,  # registering again names the group's master now
            policy=self.policy,
        )
        client.start()
        self.client = client

    async def _master_address(self) -> list[str]:
        """Where to look for the master: ``--master`` first (an operator's choice, as in
        RocketMQ), then the master the name server names (it follows failovers)."""
        candidates = [self._configured_master or "", self._discovered_master]
        return list(dict.fromkeys(c for c in candidates if c))

    # -- role changes ---------------------------------------------------------------------

    async def learned(self, master_address: str, master_ha: str, master_epoch: int) -> None:
        """The name server named the group's master: a slave follows it; a master with an older
        epoch steps down and follows it."""
        broker = self._broker
        if not master_ha or master_address == self._own_address():
            return
        self._discovered_master = master_ha
        own_epoch = broker.replica_log.current_epoch()
        if broker.role is Role.MASTER and master_epoch > own_epoch:
            log.warning(
                "group %r has a master with a newer epoch (%d > %d) at %s: stepping down",
                broker.name,
                master_epoch,
                own_epoch,
                master_address,
            )
            await self.demote()

    def follow(self, master_ha: str) -> None:
        """The controller named the group's master (docs/replication.md §9): follow it."""
        if master_ha:
            self._discovered_master = master_ha

    async def promote(self, *, force: bool, epoch: int | None = None) -> int:
        """Make this slave the master (refused when it is known to be behind, unless
        ``force``) at ``epoch`` when the controller granted one; returns the new epoch."""
        broker = self._broker
        if broker.role is Role.MASTER:
            return broker.replica_log.current_epoch()
        client = self.client
        progress = broker.replication
        if not force and not progress.caught_up():
            gap = progress.gap()
            raise PreconditionFailedError(
                "this slave is not known to be in sync with its master (last known gap: "
                f"{'never connected' if gap < 0 else f'{gap} bytes'}); promoting it loses what "
                "it does not have: use --force to promote anyway"
            )
        if client is not None:
            await client.stop()
            self.client = None
        epoch = await broker.promote(epoch)
        broker.replica_log.ensure_identity()
        await self._serve()
        await self._on_change()
        return epoch

    async def demote(self) -> None:
        """Become a slave of the group's newer master: stop serving slaves and follow it."""
        broker = self._broker
        if broker.role is Role.SLAVE:
            return
        if self.server is not None:
            await self.server.close()
            self.server = None
        await broker.demote()
        self._follow()
        await self._on_change()

    async def drop_slaves(self) -> None:
        """End the slaves' links (a master that lost its controller lease, §9)."""
        if self.server is not None:
            await self.server.drop_links()

    async def close(self) -> None:
        """End the replication side at shutdown."""
        if self.client is not None:
            await self.client.stop()
        if self.server is not None:
            await self.server.close()
