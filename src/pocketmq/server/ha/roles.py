"""A broker process's part in its group: serve slaves as master, follow the master as slave, and
switch between the two (docs/replication.md §6).

A master listens on its replication port; a slave runs one link to its master, whose replication
address comes from the controller (etcd's leader), ``--master``, or the name server. A promotion
turns a slave into the master (a new epoch). A master steps down — and then cuts what its log has
beyond their shared history — only on a verified word: etcd's, under a controller (server/ha/
failover.py); without one, the name server's claim that the group has a newer master is checked
with that master itself, on its replication port (a probe: docs/replication.md §6).
"""

from __future__ import annotations

import enum
import logging
import ssl
from collections.abc import Awaitable, Callable

from pocketmq.broker import Broker
from pocketmq.broker.ha.replica_log import ReplicaRefused
from pocketmq.broker.ha.replication import Role
from pocketmq.errors import PreconditionFailedError, ProtocolError
from pocketmq.protocol import replication as ha
from pocketmq.server.ha.handshake import LinkPolicy, open_link
from pocketmq.server.ha.master import HaServer
from pocketmq.server.ha.slave import HaClient

__all__ = ["Claim", "GroupRole"]


class Claim(enum.Enum):
    """What a check of "your group has a newer master" found (docs/replication.md §6)."""

    NONE = "none"  # nobody claims a newer master
    CONFIRMED = "confirmed"  # that master answered as one of this group and cluster, newer
    DISPROVED = "disproved"  # it answered, and is not (another cluster, older, not a master)
    UNVERIFIED = "unverified"  # it could not be reached, or may not write right now


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
        self._discovered_master = ""  # the name server's word (no controller)
        self._leader_master = ""  # the controller's word
        # set when a controller decides the roles: the name server's claims are ignored
        self.controlled = False
        self._doubted: set[tuple[str, int]] = set()  # claims logged as not verified
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
            self._broker.ha.replica_log.ensure_identity()
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
        """Where to look for the master. Under a controller: the leader etcd names, only (or
        ``--master`` while etcd has named none). Otherwise ``--master`` first (an operator's
        choice, as in RocketMQ), then the master the name server names (it follows
        promotions)."""
        if self.controlled:
            chosen = self._leader_master or self._configured_master
            return [chosen] if chosen else []
        candidates = [self._configured_master or "", self._discovered_master]
        return list(dict.fromkeys(c for c in candidates if c))

    # -- role changes ---------------------------------------------------------------------

    async def learned(self, master_address: str, master_ha: str, master_epoch: int) -> Claim:
        """The name server named the group's master. A slave (without a controller) follows it.
        A master is told its group has a newer one: it steps down only once that master
        confirmed it on its replication port; under a controller the claim is ignored (etcd
        alone decides, §9)."""
        broker = self._broker
        if self.controlled or not master_ha or master_address == self._own_address():
            return Claim.NONE
        self._discovered_master = master_ha
        own_epoch = broker.ha.replica_log.current_epoch()
        if broker.role is not Role.MASTER or master_epoch <= own_epoch:
            return Claim.NONE
        verdict = await self.verify_master(master_ha, own_epoch)
        claim = (master_address, master_epoch)
        if verdict is Claim.CONFIRMED:
            log.warning(
                "group %r has a master with a newer epoch (%d > %d) at %s, confirmed on its "
                "replication port: stepping down",
                broker.name,
                master_epoch,
                own_epoch,
                master_address,
            )
            await self.demote()
        elif claim not in self._doubted:
            self._doubted.add(claim)
            log.warning(
                "the name server says group %r has a master with epoch %d at %s (replication "
                "%s), but it does not confirm it (%s): not stepping down",
                broker.name,
                master_epoch,
                master_address,
                master_ha,
                verdict.value,
            )
        return verdict

    async def verify_master(self, address: str, own_epoch: int) -> Claim:
        """Ask the replication port at ``address`` who it is: CONFIRMED when it answers as a
        master of this group and cluster with an epoch above ``own_epoch``. The probe opens
        the link as a slave does (server/ha/handshake.py): with ``--authentication`` the
        claimed master must prove the cluster key first, so a rogue without it can never make
        this master step down (docs/replication.md §6, docs/security.md)."""
        broker = self._broker
        try:
            link = await open_link(
                address,
                group=broker.name,
                broker_id=broker.config.broker_id,
                policy=self.policy,
                tls=self._tls_client,
            )
        except ReplicaRefused as exc:  # another group, no proof of the key, or it refused us
            log.info("the claimed master at %s is not one of this group: %s", address, exc)
            return Claim.DISPROVED
        except (ConnectionError, OSError, ProtocolError, ValueError) as exc:
            log.info("cannot reach the claimed master at %s: %s", address, exc)
            return Claim.UNVERIFIED
        try:
            if link.master_role == "fenced":  # it may be the real one, waiting for its own word
                return Claim.UNVERIFIED
            if link.master_role != "master" or link.master_epoch <= own_epoch:
                return Claim.DISPROVED
            reply = await link.hello(self._probe())
        except ReplicaRefused:  # it stopped taking writes in between
            return Claim.UNVERIFIED
        except (ConnectionError, OSError, ProtocolError, ValueError) as exc:
            log.info("the claimed master at %s did not answer the probe: %s", address, exc)
            return Claim.UNVERIFIED
        finally:
            await link.close()
        newest = max((e.number for e in reply.epochs), default=0)
        if reply.cluster_id != broker.ha.replica_log.cluster_id() or newest <= own_epoch:
            return Claim.DISPROVED
        return Claim.CONFIRMED

    def _probe(self) -> ha.HaHello:
        """The HA_HELLO of a probe: this broker, asking who the master is (§6)."""
        replica_log = self._broker.ha.replica_log
        return ha.HaHello(
            self._broker.name,
            replica_log.cluster_id(),
            self._broker.config.broker_id,
            self._own_address(),
            replica_log.end,
            [ha.HaEpoch(number, start) for number, start in replica_log.epochs()],
            probe=True,
        )

    def follow(self, master_ha: str) -> None:
        """The controller named the group's master (docs/replication.md §9): a slave follows
        it, leaving at once a link to any other."""
        if not master_ha:
            return
        self._leader_master = master_ha
        if self.client is not None:
            self.client.switch(master_ha)

    async def announce(self) -> None:
        """Tell the name server now (the role others see changed)."""
        await self._on_change()

    async def promote(self, *, force: bool, epoch: int | None = None) -> int:
        """Make this slave the master (refused when it is known to be behind, unless
        ``force``) at ``epoch`` when the controller granted one; returns the new epoch."""
        broker = self._broker
        if broker.role is Role.MASTER:
            return broker.ha.replica_log.current_epoch()
        client = self.client
        progress = broker.ha.replication
        missing = broker.ha.replica_log.missing()
        if not force and missing is not None:
            raise PreconditionFailedError(
                f"this slave lacks records it once held: {missing.describe()}; it copies them "
                "again from its master once linked. Promoting it now loses them: use --force "
                "to promote anyway"
            )
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
        if missing is not None:
            log.error("promoted although it lacks %s: those records are lost", missing.describe())
            broker.ha.replica_log.give_up_missing()
        epoch = await broker.promote(epoch)
        broker.ha.replica_log.ensure_identity()
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
