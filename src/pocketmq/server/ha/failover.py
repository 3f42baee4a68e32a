"""Automatic failover: etcd decides who is the master of a broker group (docs/replication.md §9).

A master holds a lease and writes only while it can prove the lease lives (renewal time + lease −
margin); a slave claims mastership with one compare-and-swap transaction once the master's lease
is gone, its own link to the master is down, and it is in the in-sync set with the longest log of
the live candidates. Everything else — promotion, stepping down, cutting a divergent suffix — is
the manual machinery of §6, called from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pocketmq.broker import Broker
from pocketmq.broker.ha.replication import Role
from pocketmq.errors import PreconditionFailedError
from pocketmq.server.ha.etcd import ControllerUnavailable, Etcd, Lease
from pocketmq.server.ha.roles import GroupRole

__all__ = ["ControllerTimings", "Failover"]

log = logging.getLogger("pocketmq.server.ha")

ROOT = "/pocketmq/groups"


@dataclass(frozen=True, slots=True)
class ControllerTimings:
    """The failover clock (docs/replication.md §9 and docs/semantics.md)."""

    lease: int = 6  # seconds etcd keeps a silent master's lease
    margin: float = 2.0  # a master stops writing this long before its lease can expire
    claim_delay: float = 1.0  # a slave waits this long with the leader gone before it claims
    poll: float = 0.5  # how often a slave looks at etcd

    @property
    def renew(self) -> float:
        """How often a master renews its lease."""
        return self.lease / 6


class Failover:
    """One broker's side of the controller: keep the lease as master, elect as slave."""

    def __init__(
        self,
        broker: Broker,
        group: GroupRole,
        etcd: Etcd,
        *,
        own_address: Callable[[], str],
        timings: ControllerTimings | None = None,
    ) -> None:
        self._broker = broker
        self._group = group
        self._etcd = etcd
        self._own_address = own_address
        self.timings = timings or ControllerTimings()
        prefix = f"{ROOT}/{broker.name}"
        self._epoch_key = f"{prefix}/epoch"
        self._leader_key = f"{prefix}/leader"
        self._isr_key = f"{prefix}/isr"
        self._candidates = f"{prefix}/candidates/"
        self._lease: Lease | None = None
        self._leader_value: dict[str, Any] | None = None  # ours, while we lead
        self._isr: list[int] = []
        self._absent_since: float | None = None
        self._serving_without = False
        self._fenced_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()  # etcd's view of the group changed: look now
        self._candidacy: tuple[dict[str, int], Lease] | None = None  # as last published
        self._claiming = asyncio.Lock()
        self.failovers = 0
        self.last_failover_seconds = 0.0
        self.last_failover_at = 0.0  # time.time() when this broker last became master by it
        self._state = "starting"
        self._renew_at = 0.0  # when the lease is next renewed (monotonic)
        # the master's caught-up set moved: etcd's isr is written at once, not at the next renewal
        self._isr_due = asyncio.Event()
        group.controlled = True  # the name server's word on roles no longer counts
        replication = broker.ha.replication
        replication.controller = self.status
        # only slaves etcd's isr names count for a SYNC send: none before etcd said so (§9)
        replication.set_isr(frozenset({self.me}))
        replication.caught_up_moved = self._isr_due.set

    @property
    def me(self) -> int:
        """This broker's id in its group."""
        return self._broker.config.broker_id

    @staticmethod
    def hold_writes(broker: Broker) -> None:
        """Before the broker's ports open: a master takes no write, and says it is no master,
        until etcd has confirmed its lease at the current epoch (§9)."""
        replication = broker.ha.replication
        if broker.role is Role.MASTER:
            replication.lease_lost = (
                f"broker {broker.name!r} is waiting for its controller (etcd) to confirm it is "
                "its group's master"
            )
            replication.lease_until = time.monotonic()  # expired: no writes yet

    def start(self) -> None:
        """Refuse writes until etcd has answered, then keep the role etcd decides."""
        self.hold_writes(self._broker)
        self._task = asyncio.create_task(self._run(), name="failover")
        self._watcher = asyncio.create_task(
            self._etcd.watch(f"{ROOT}/{self._broker.name}/", self._changed.set),
            name="failover-watch",
        )

    async def close(self, *, hand_over: bool = True) -> None:
        """Stop; a leading master revokes its lease so a slave takes over at once."""
        for task in (self._task, self._watcher):
            while task is not None and not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=0.1)
        self._task = self._watcher = None
        if hand_over and self._leader_value is not None and self._lease is not None:
            self._broker.ha.replication.lease_until = time.monotonic()
            with contextlib.suppress(ControllerUnavailable):
                await self._etcd.revoke(self._lease)
        await self._etcd.close()

    # -- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        replication = self._broker.ha.replication
        while True:
            try:
                if self._broker.role is Role.MASTER:
                    await self._master_round()
                else:
                    await self._slave_round()
                replication.reaches_controller = True
            except ControllerUnavailable as exc:
                replication.reaches_controller = False
                await self._unreachable(exc)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep failing over possible; the next round retries
                log.exception("failover round failed")
            await self._pause()

    async def _pause(self) -> None:
        """Until the next round: a master renews every lease / 6 and writes etcd's in-sync set
        the moment its caught-up set moves (a slave caught up, or its time ran out: §3); a
        slave looks every ``poll``, when its claim delay ends, or at once when etcd's view of
        the group changes (a watch)."""
        now = time.monotonic()
        if self._broker.role is Role.MASTER:
            interval = self.timings.renew if not self._serving_without else 0.2
            if self._leader_value is None or self._serving_without:
                await asyncio.sleep(interval)
                return
            # a slave whose time runs out leaves the caught-up set on replication's own timer,
            # which sets _isr_due like any other move of the set
            interval = max(0.02, min(interval, self._renew_at - now))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._isr_due.wait()
            return
        interval = self.timings.poll
        if self._absent_since is not None:
            claim_at = self._absent_since + self.timings.claim_delay
            if claim_at > now:
                interval = min(interval, claim_at - now + 0.01)
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await self._changed.wait()

    def status(self) -> dict[str, object]:
        """The controller's view for ``broker status`` — as of now: a master whose lease ran out
        since the last round is ``fenced``, not ``master`` (§9)."""
        replication = self._broker.ha.replication
        until = replication.lease_until
        state = self._state
        if state == "master" and replication.write_refusal():
            state = "fenced"
        return {
            "state": state,
            "lease_remaining": (
                None if until is None else round(max(0.0, until - time.monotonic()), 2)
            ),
            "isr": list(self._isr),
            "reaches_etcd": replication.reaches_controller,
            "failovers": self.failovers,
            "last_failover_seconds": round(self.last_failover_seconds, 3),
            "last_failover_at": round(self.last_failover_at, 3),
        }

    # -- master ---------------------------------------------------------------------------

    async def _master_round(self) -> None:
        replication = self._broker.ha.replication
        if self._leader_value is not None and self._lease is not None:
            sent = time.monotonic()
            if sent < self._renew_at and not self._serving_without:
                await self._write_isr()  # woken early: the caught-up set moved
                return
            if await self._etcd.refresh(self._lease):
                self._holding(sent)
                await self._write_isr()
                return
            log.error(
                "the controller lease of %r expired: taking writes no more", self._broker.name
            )
            await self._fence("its controller lease expired")
            self._leader_value = None
            self._lease = None
        await self._acquire()
        if self._leader_value is None and replication.role is Role.MASTER:
            replication.lease_until = min(replication.lease_until or 0.0, time.monotonic())

    async def _acquire(self) -> None:
        """Take (or take back) the group's leadership, or step down if another broker has it."""
        etcd = self._etcd
        epoch_value, epoch_rev = await etcd.get(self._epoch_key)
        leader, _ = await etcd.get(self._leader_key)
        own_epoch = self._broker.ha.replica_log.current_epoch()
        if leader is not None and leader.get("broker_id") != self.me:
            await self._step_down(leader, "another broker holds the group's lease")
            return
        if epoch_value is not None and (
            epoch_value["broker_id"] != self.me or epoch_value["epoch"] > own_epoch
        ):
            # failed over while this broker was away: it follows whoever leads now
            await self._step_down(leader, f"the group is at epoch {epoch_value['epoch']}")
            return
        lease = await self._grant()
        sent = time.monotonic()
        value = self._leader(own_epoch, lease)
        self._broker.ha.replication.set_isr(frozenset({self.me}))  # what the swap writes
        expect: dict[str, int | dict[str, Any] | None] = {
            self._epoch_key: epoch_rev,
            self._leader_key: leader,  # absent, or this broker's previous incarnation
        }
        writes = {
            self._epoch_key: ({"epoch": own_epoch, "broker_id": self.me}, None),
            self._leader_key: (value, lease),
            # the in-sync set starts as the master alone, in the same transaction: a master
            # that dies at once stays electable when it comes back
            self._isr_key: ({"epoch": own_epoch, "members": [self.me]}, None),
        }
        if await etcd.swap(expect, writes):
            self._leader_value = value
            self._holding(sent)
            self._isr = [self.me]
            await self._write_isr()
            log.info("broker %r leads its group at epoch %d", self._broker.name, own_epoch)
            await self._group.announce()  # the name server learns of its master now

    def _leader(self, epoch: int, lease: Lease) -> dict[str, Any]:
        return {
            "broker_id": self.me,
            "address": self._own_address(),
            "ha_address": self._group.ha_address,
            "epoch": epoch,
            "lease": lease.id,
        }

    async def _grant(self) -> Lease:
        if self._lease is None or not await self._etcd.refresh(self._lease):
            self._lease = await self._etcd.grant(self.timings.lease)
        return self._lease

    def _holding(self, sent: float) -> None:
        """A renewal sent at ``sent`` succeeded: writes are safe until lease − margin later."""
        replication = self._broker.ha.replication
        replication.lease_until = sent + self.timings.lease - self.timings.margin
        self._renew_at = sent + self.timings.renew
        if self._serving_without:
            log.warning("etcd reachable again: group %r is back to normal", self._broker.name)
        self._serving_without = False
        replication.without_controller = False
        self._state = "master"

    async def _write_isr(self) -> None:
        """Record the master and its caught-up slaves as etcd's isr, while the lease is ours. A
        slave leaving is counted out at once (replication.in_sync filters on both sets); a slave
        joining counts for SYNC sends only once etcd stored it, so every record a send was told
        is replicated sits on a slave an election may pick (§9)."""
        self._isr_due.clear()
        replication = self._broker.ha.replication
        members = sorted({self.me, *(s.broker_id for s in replication.caught_up_slaves())})
        if members == self._isr or self._leader_value is None:
            return
        epoch = self._leader_value["epoch"]
        expect: dict[str, int | dict[str, Any] | None] = {self._leader_key: self._leader_value}
        if await self._etcd.swap(
            expect, {self._isr_key: ({"epoch": epoch, "members": members}, None)}
        ):
            self._isr = members
            replication.set_isr(frozenset(members))

    async def _fence(self, why: str) -> None:
        replication = self._broker.ha.replication
        replication.without_controller = False
        replication.lease_lost = (
            f"broker {self._broker.name!r} {why}: another broker may be master now; retry"
        )
        replication.lease_until = min(replication.lease_until or 0.0, time.monotonic())
        if self._state != "fenced":
            self._fenced_at = time.monotonic()
        self._state = "fenced"
        await self._group.drop_slaves()

    async def _step_down(self, leader: dict[str, Any] | None, why: str) -> None:
        log.warning("broker %r steps down: %s", self._broker.name, why)
        self._leader_value = None
        replication = self._broker.ha.replication
        replication.lease_until = time.monotonic()
        if leader is not None:
            self._group.follow(leader.get("ha_address", ""))
        await self._group.demote()
        replication.lease_until = None
        self._state = "slave"

    async def _unreachable(self, exc: ControllerUnavailable) -> None:
        """etcd did not answer: a master keeps writing only while its lease provably lives, or
        while every in-sync slave is connected and cannot reach etcd either (§9)."""
        replication = self._broker.ha.replication
        if self._broker.role is not Role.MASTER:
            self._state = "slave (etcd unreachable)"
            return
        slaves = replication.in_sync()
        if (
            self._leader_value is not None
            and slaves
            and all(s.reaches_controller is False for s in slaves)
        ):
            # nobody can be elected while no slave reaches etcd, and a slave still linked to its
            # master never claims: keep writing (decided before the lease runs out, so writes
            # never pause)
            if not self._serving_without:
                log.error(
                    "etcd unreachable from the whole group %r (%s): no failover is possible; "
                    "serving on",
                    self._broker.name,
                    exc,
                )
            self._serving_without = True
            self._state = "serving-without-etcd"
            replication.without_controller = True
            replication.lease_until = None
            return
        until = replication.lease_until
        if until is not None and time.monotonic() < until:
            return  # the lease still provably lives
        if self._serving_without or self._state != "fenced":
            log.error(
                "broker %r cannot reach etcd (%s): taking writes no more", self._broker.name, exc
            )
        self._serving_without = False
        await self._fence("cannot reach its controller (etcd)")

    # -- slave ----------------------------------------------------------------------------

    async def _slave_round(self) -> None:
        self._state = "slave"
        leader, _ = await self._etcd.get(self._leader_key)
        if leader is not None and leader.get("broker_id") != self.me:
            self._absent_since = None
            self._group.follow(leader.get("ha_address", ""))
            return
        # no leader (or only this broker's previous incarnation, whose lease runs out)
        now = time.monotonic()
        if self._absent_since is None:
            self._absent_since = now
        replication = self._broker.ha.replication
        if (
            replication.master_address
            and time.time() - replication.contact_at < self.timings.claim_delay
        ):
            return  # the master still streams to us: it fences itself before it drops us
        epoch_value, _ = await self._etcd.get(self._epoch_key)
        isr = await self._isr_of(epoch_value)
        if self.me not in isr or self._broker.ha.replica_log.missing() is not None:
            return  # not electable (a slave lacking records it once held: §4)
        assert epoch_value is not None
        lease = await self._grant()
        candidacy = {"log_end": self._broker.ha.replica_log.end, "epoch": epoch_value["epoch"]}
        if (candidacy, lease) != self._candidacy:  # a write wakes every watcher: only changes
            await self._etcd.put(self._candidates + str(self.me), candidacy, lease)
            self._candidacy = (candidacy, lease)
        waited = now - self._absent_since
        if waited < self.timings.claim_delay or leader is not None:
            return
        # every other member of the in-sync set says how much log it has before anyone claims:
        # the longest log wins, or an acknowledged record is lost (§9); one that says nothing
        # for three claim delays is taken for down
        peers = isr - {self.me, epoch_value.get("broker_id")}
        heard = await self._candidacies(epoch_value["epoch"])
        if peers - heard.keys() and waited < 3 * self.timings.claim_delay:
            return
        with contextlib.suppress(PreconditionFailedError):
            await self.claim(force=False)

    async def _isr_of(self, epoch_value: dict[str, Any] | None) -> set[int]:
        """The in-sync set etcd holds for the group's current epoch (empty: none)."""
        isr, _ = await self._etcd.get(self._isr_key)
        if epoch_value is None or isr is None or isr.get("epoch") != epoch_value["epoch"]:
            return set()
        return {int(member) for member in isr["members"]}

    async def _candidacies(self, epoch: int) -> dict[int, int]:
        """The log ends candidates published for this election (the group's epoch ``epoch``)."""
        found = await self._etcd.prefix(self._candidates)
        return {
            int(key.rsplit("/", 1)[1]): int(value["log_end"])
            for key, value in found.items()
            if value.get("epoch", epoch) == epoch
        }

    async def _in_sync_set(self) -> bool:
        """Whether this broker is in the in-sync set of the group's current epoch."""
        epoch_value, _ = await self._etcd.get(self._epoch_key)
        return self.me in await self._isr_of(epoch_value)

    async def claim(self, *, force: bool) -> int:
        """Become the group's master through etcd (an election, or ``pocketmq broker promote``
        under a controller); returns the epoch. PreconditionFailedError when not allowed."""
        async with self._claiming:
            if self._broker.role is Role.MASTER:
                return self._broker.ha.replica_log.current_epoch()
            # the failover's length: from the last word of the old master to this promotion
            contact = self._broker.ha.replication.contact_at
            started = contact or time.time()
            etcd = self._etcd
            leader, _ = await etcd.get(self._leader_key)
            if leader is not None:
                raise PreconditionFailedError(
                    f"broker {leader.get('broker_id')} leads group {self._broker.name!r}: "
                    "stop it first"
                )
            epoch_value, epoch_rev = await etcd.get(self._epoch_key)
            if epoch_value is None and not force:
                raise PreconditionFailedError(
                    "the group never had a master: its master claims first"
                )
            current = epoch_value["epoch"] if epoch_value else 0
            if not force:
                missing = self._broker.ha.replica_log.missing()
                if missing is not None:
                    raise PreconditionFailedError(
                        f"broker {self.me} lacks records it once held: {missing.describe()}; "
                        "promoting it loses them: use --force to promote anyway"
                    )
                if not await self._in_sync_set():
                    raise PreconditionFailedError(
                        f"broker {self.me} is not in the in-sync set of epoch {current}"
                    )
                mine = self._broker.ha.replica_log.end
                for other, log_end in (await self._candidacies(current)).items():
                    if other != self.me and (log_end, -other) > (mine, -self.me):
                        raise PreconditionFailedError(f"broker {other} holds a longer log")
            lease = await self._grant()
            self._broker.ha.replication.set_isr(frozenset({self.me}))  # what the swap writes
            epoch = max(current, self._broker.ha.replica_log.current_epoch()) + 1
            value = self._leader(epoch, lease)
            sent = time.monotonic()
            writes = {
                self._epoch_key: ({"epoch": epoch, "broker_id": self.me}, None),
                self._leader_key: (value, lease),
                self._isr_key: ({"epoch": epoch, "members": [self.me]}, None),
            }
            if not await etcd.swap({self._epoch_key: epoch_rev, self._leader_key: None}, writes):
                raise PreconditionFailedError("another broker claimed the group first")
            self._leader_value = value
            self._holding(sent)
            try:
                epoch = await self._group.promote(force=True, epoch=epoch)
            except Exception:
                await etcd.revoke(lease)  # let another candidate try
                self._leader_value = None
                self._lease = None
                raise
            # the replication port is known now: slaves read it from here
            updated = {**value, "ha_address": self._group.ha_address}
            if await etcd.swap({self._leader_key: value}, {self._leader_key: (updated, lease)}):
                self._leader_value = updated
            self._isr = [self.me]
            self.failovers += 1
            self.last_failover_at = time.time()
            self.last_failover_seconds = self.last_failover_at - started
            self._absent_since = None
            log.warning(
                "broker %d is master of group %r at epoch %d (elected through etcd)",
                self.me,
                self._broker.name,
                epoch,
            )
            return epoch
