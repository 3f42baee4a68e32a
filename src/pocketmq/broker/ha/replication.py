"""A broker's place in its group: master or slave, its slaves' progress, and what a send waits for.

The wire side of replication is the server's (server/ha); this module holds what the broker core
decides with it (docs/replication.md):

- which slaves are **caught up**: connected, members of the group (etcd's member list under a
  controller), within ``ha_max_gap_bytes`` of the master's end, caught up with it within the
  last ``ha_max_lag_time`` (broker/ha/catchup.py: a slave that stops acknowledging, or lags in time,
  drops out by that bound and holds no send or reader longer), and holding again whatever a
  repair made them copy anew. Under a controller the master writes that set as etcd's ``isr``;
- which are **in sync**: the caught-up slaves, and under a controller only those etcd's ``isr``
  already names. A SYNC send counts only their acknowledgements: an acknowledgement from a slave
  etcd does not yet list would make a record "replicated" on a broker no election may pick
  (docs/replication.md §3, §9);
- what a ``SYNC`` send waits for: an in-sync slave's acknowledgement of the record, at most
  ``ha_sync_timeout``; with no slave in sync it is answered at once with SLAVE_NOT_AVAILABLE;
- the **confirmed offset** readers may read up to, so what a failover could discard is never
  delivered, and waking the long polls of the queues whose messages it makes readable;
- the role others see (:meth:`Replication.acting_role`): a master that may not write now is
  ``fenced``, never ``master`` (docs/replication.md §6, §9).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.broker.ha.catchup import CatchUpClock
from pocketmq.store import MessageStore

__all__ = ["ReplicaOutcome", "Replication", "ReplicationMode", "Role", "SlaveProgress"]

_LATENCY_WINDOW = 10_000
"""Records whose replication latency is remembered (status shows their percentiles)."""


def _nothing() -> None:
    return None


class Role(enum.Enum):
    """A broker's place in its group (docs/replication.md §1)."""

    MASTER = "master"
    SLAVE = "slave"


class ReplicationMode(enum.Enum):
    """What a send on a master waits for (docs/replication.md §3): its own store only, or also an
    in-sync slave."""

    ASYNC = "async"
    SYNC = "sync"


class ReplicaOutcome(enum.Enum):
    """What a send learned from replication."""

    REPLICATED = "REPLICATED"  # an in-sync slave has it (or replication is asynchronous)
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # no slave in sync: on the master only
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # the slave did not acknowledge in time


@dataclass
class SlaveProgress:
    """One connected slave, as the master sees it."""

    broker_id: int
    address: str
    acked: int = 0
    flushed: int = 0
    connected_at: float = field(default_factory=time.time)
    acked_at: float = 0.0
    # whether the slave reaches the group's controller (etcd), as it said in its last
    # acknowledgement: None when no controller is configured (docs/replication.md §9)
    reaches_controller: bool | None = None
    # the slave's log lacks records it once held up to here (a repair made it copy them
    # again, docs/replication.md §4): not in sync before it acknowledged this far
    missing_until: int = 0
    # the in-sync time rule: the last time (monotonic) the master's end was at most what this
    # slave acknowledged (broker/ha/catchup.py)
    caught_up_at: float = float("-inf")
    # joined the caught-up set (and, below, the counted in-sync set) holding the confirmed
    # offset of that moment, as RocketMQ's controller adds a slave to the sync state set only
    # once it holds the confirm offset: a slave joining never moves readers' limit back
    admitted: bool = False
    counted: bool = False


class Replication:
    """The replication state of one broker (master side: its slaves; slave side: its role)."""

    def __init__(
        self,
        store: MessageStore,
        *,
        role: Role,
        mode: ReplicationMode,
        max_gap: int,
        sync_timeout: float,
        wake: Callable[[set[tuple[str, int]]], None],
        max_lag_time: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._role = role
        store.replica_of = "the group's master" if role is Role.SLAVE else ""
        self.mode = mode
        self.max_gap = max_gap
        self.max_lag_time = max_lag_time
        self.sync_timeout = sync_timeout
        self._wake = wake
        self._clock = clock
        self._catch_up = CatchUpClock(max_lag_time, clock)
        self._lag_timer: asyncio.TimerHandle | None = None
        self._lag_timer_at = 0.0
        self.slaves: dict[object, SlaveProgress] = {}
        # the broker ids etcd lists as members of the group (None: no controller, every
        # authenticated slave of the group counts); set by server/ha/members.py
        self.members: frozenset[int] | None = None
        # the broker ids etcd's ``isr`` of this master's epoch names (None: no controller, every
        # caught-up slave counts); set by server/ha/failover.py once etcd stored them
        self.isr: frozenset[int] | None = None
        # called when the caught-up set changes (the controller writes etcd's isr at once)
        self.caught_up_moved: Callable[[], None] = _nothing
        self._caught_up_ids: frozenset[int] = frozenset()
        self.links_refused = 0  # replication links refused (no key, a wrong one, a non-member)
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._unconfirmed: deque[tuple[int, set[tuple[str, int]]]] = deque()
        self.confirmed = -1  # -1: no limit (no slave in sync, or async replication)
        # the log end readers could read to when the first slave was counted after none: what
        # they were shown stays readable (readers' limit never moves back)
        self._shown = -1
        self._growth: asyncio.Future[None] | None = None
        # append time of recent log ends, and the latest append-to-acknowledgement times
        self._appended: deque[tuple[int, float]] = deque()
        self.latencies: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self.chunks_sent = 0  # HA_DATA frames with records, to every slave
        self.bytes_sent = 0
        # a master that has not yet heard from the name server that no newer master exists
        # refuses writes with this reason ("" when it may write): docs/replication.md §6
        self.fence = ""
        # a broker still starting takes no write yet ("" once started): it answers this instead of
        # flow control's TOO_MANY_REQUESTS, which the stalls of starting would otherwise trigger
        self.starting = ""
        # with a controller (docs/replication.md §9): writes only until this monotonic time (None:
        # no lease limit), the reason past it, and whether this broker reaches etcd now
        self.lease_until: float | None = None
        self.lease_lost = ""
        # etcd is unreachable from the whole group: writes go on only while every in-sync slave is
        # linked and says it cannot reach etcd either (nobody can be elected meanwhile)
        self.without_controller = False
        self.reaches_controller: bool | None = None
        # the failover's view, for status (server/ha): read when status is asked, so it is current
        self.controller: Callable[[], dict[str, object]] = dict
        # a slave's view of its master, kept current by its replication link (server/ha)
        self.master_address = ""  # the replication address while linked ("" otherwise)
        self.master_end = -1  # the master's end of log at the last contact (-1: never met)
        self.contact_at = 0.0  # time.time() of the last contact
        self.link_error = ""  # why the last link ended, if it failed
        self.acting = False  # serving pops while its master is away (docs/replication.md §5)

    @property
    def role(self) -> Role:
        """Master or slave; a slave's store refuses local appends (the log stays a copy)."""
        return self._role

    @role.setter
    def role(self, role: Role) -> None:
        self._role = role
        self.store.replica_of = "the group's master" if role is Role.SLAVE else ""

    def write_refusal(self) -> str:
        """Why this master must not take a write now ("" when it may): still starting, a fence set
        at start-up (§6), or a controller lease that may have expired (§9)."""
        if self.starting:
            return self.starting
        if self.fence:
            return self.fence
        if self.lease_until is not None and time.monotonic() >= self.lease_until:
            return self.lease_lost or (
                "this broker lost its controller lease: another broker may be master now"
            )
        if self.without_controller:
            slaves = self.in_sync()
            if not slaves or any(s.reaches_controller is not False for s in slaves):
                return (
                    "this broker cannot reach its controller (etcd) and a slave can: another "
                    "broker may be master now"
                )
        return ""

    def acting_role(self) -> str:
        """The role status, readiness and the name server are told: ``master`` only while this
        broker may take writes; a master that may not (starting, waiting for its name server or
        controller, or past its lease) is ``fenced`` (docs/replication.md §6, §9)."""
        if self._role is Role.SLAVE:
            return "slave"
        return "fenced" if self.write_refusal() else "master"

    def lease_remaining(self) -> float | None:
        """Seconds this master may still write on its controller lease (None: no lease limit)."""
        if self.lease_until is None or self.without_controller:
            return None
        return max(0.0, self.lease_until - time.monotonic())

    # -- a slave's progress ---------------------------------------------------------------

    def heard_from_master(self, master_end: int) -> None:
        """A slave: the master's end of log at this contact (how far behind this slave is)."""
        self.master_end = master_end
        self.contact_at = time.time()

    def gap(self) -> int:
        """A slave: how far behind its master it was at the last contact (-1: never met)."""
        if self.master_end < 0:
            return -1
        return max(0, self.master_end - self.store.write_position)

    def caught_up(self) -> bool:
        """A slave: whether it held all but ``max_gap`` bytes of its master's log at the last
        contact (what a promotion asks, docs/replication.md §6)."""
        return 0 <= self.gap() <= self.max_gap

    # -- slaves ---------------------------------------------------------------------------

    def slave_connected(
        self, key: object, broker_id: int, address: str, position: int, missing_until: int = 0
    ) -> None:
        """A slave finished its handshake at ``position``: track its progress from there
        (``missing_until``: it lacks records it once had up to there, and is not in sync before
        it has them again)."""
        end = self.store.write_position
        if not self.slaves:
            self._catch_up.reset(end)
        slave = SlaveProgress(broker_id, address, acked=position, flushed=position)
        slave.missing_until = missing_until
        slave.caught_up_at = self._catch_up.caught_up_at(position, end)
        self.slaves[key] = slave
        self._update()

    def slave_gone(self, key: object) -> None:
        """A slave disconnected: it no longer counts as in sync."""
        self.slaves.pop(key, None)
        if not self.slaves:
            self._catch_up.clear()
        self._update()

    def acked(
        self, key: object, written: int, flushed: int, reaches_controller: bool | None = None
    ) -> None:
        """A slave reported how far it has written and flushed (progress only moves forward), and
        whether it reaches the controller."""
        slave = self.slaves.get(key)
        if slave is None:
            return
        slave.reaches_controller = reaches_controller
        slave.acked = max(slave.acked, written)
        slave.flushed = max(slave.flushed, flushed)
        slave.acked_at = time.time()
        caught = self._catch_up.caught_up_at(slave.acked, self.store.write_position)
        slave.caught_up_at = max(slave.caught_up_at, caught)
        now = time.monotonic()
        appended = self._appended
        while appended and appended[0][0] <= written:
            self.latencies.append(now - appended.popleft()[1])
        self._update()

    def set_members(self, members: frozenset[int] | None) -> None:
        """The group's members as etcd lists them (None: no controller): only their slaves'
        acknowledgements count (docs/replication.md §2, "Membership")."""
        if members != self.members:
            self.members = members
            self._update()

    def is_member(self, broker_id: int) -> bool:
        """Whether a slave with this id may count (always, without a controller)."""
        return self.members is None or broker_id in self.members

    def set_isr(self, isr: frozenset[int] | None) -> None:
        """etcd's ``isr`` of this master's epoch as stored (None: no controller): only these
        slaves' acknowledgements count from now on (module doc; docs/replication.md §9)."""
        if isr != self.isr:
            self.isr = isr
            self._update()

    def in_sync(self) -> list[SlaveProgress]:
        """The slaves a SYNC send may wait for and readers' confirmed offset follows: the caught-up
        slaves, and under a controller only those etcd's ``isr`` names, so a record counted as
        replicated is on a slave an election may pick (module doc; docs/replication.md §3, §9).
        A slave is counted from the moment it is in both holding the confirmed offset."""
        end = self.store.write_position
        oldest = self._clock() - self.max_lag_time
        return [s for s in self.slaves.values() if s.counted and self._within(s, end, oldest)]

    def caught_up_slaves(self) -> list[SlaveProgress]:
        """The slaves within ``max_gap`` bytes of the master's end, caught up with it within
        ``max_lag_time`` seconds, members, missing nothing they once had, and admitted holding
        the confirmed offset: what a controller writes as etcd's ``isr`` (module doc;
        docs/replication.md §3)."""
        end = self.store.write_position
        oldest = self._clock() - self.max_lag_time
        return [s for s in self.slaves.values() if s.admitted and self._within(s, end, oldest)]

    def _within(self, s: SlaveProgress, end: int, oldest: float) -> bool:
        return (
            self.is_member(s.broker_id)
            and end - s.acked <= self.max_gap
            and s.caught_up_at >= oldest
            and s.acked >= s.missing_until
        )

    def _admit(self) -> list[SlaveProgress]:
        """Who joins or leaves the caught-up and the counted sets now: a slave out of the bounds
        leaves both; one within them joins each only holding the confirmed offset (with none,
        at once), so the offset readers are held to never moves back when a slave joins.
        Returns the caught-up slaves (:meth:`caught_up_slaves`)."""
        end = self.store.write_position
        oldest = self._clock() - self.max_lag_time
        threshold = self.confirmed
        isr = self.isr
        caught_up: list[SlaveProgress] = []
        for s in self.slaves.values():
            if not self._within(s, end, oldest):
                s.admitted = s.counted = False
                continue
            if not s.admitted:
                s.admitted = s.acked >= threshold
            if not s.admitted or (isr is not None and s.broker_id not in isr):
                s.counted = False
            elif not s.counted:
                s.counted = s.acked >= threshold
            if s.admitted:
                caught_up.append(s)
        return caught_up

    def grew(self, end: int = 0) -> None:
        """The log grew to ``end``: wake the senders streaming it to slaves, and note when, for
        the replication latency (the first acknowledgement covering ``end``)."""
        if end and self.slaves:
            self._catch_up.grew(end)
            self._appended.append((end, time.monotonic()))
            if len(self._appended) > _LATENCY_WINDOW:
                self._appended.popleft()
        growth = self._growth
        if growth is not None and not growth.done():
            growth.set_result(None)

    async def wait_for_log(self, position: int, timeout: float) -> None:
        """Return once the log ends beyond ``position``, or after ``timeout``."""
        if self.store.write_position > position:
            return
        growth = self._growth
        if growth is None or growth.done():
            growth = self._growth = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.shield(growth)

    # -- sending --------------------------------------------------------------------------

    def defer(self, end: int, touched: set[tuple[str, int]]) -> bool:
        """Records up to ``end`` were appended to these queues. True: their readers are woken
        later, once the records are confirmed (sync mode with a slave in sync); False: now."""
        if self.confirmed < 0 or end <= self.confirmed:
            return False
        self._unconfirmed.append((end, touched))
        return True

    async def wait(self, end: int) -> ReplicaOutcome:
        """What a send of records ending at ``end`` may answer (docs/replication.md §3)."""
        if self.mode is ReplicationMode.ASYNC:
            return ReplicaOutcome.REPLICATED
        in_sync = self.in_sync()
        if not in_sync:
            return ReplicaOutcome.SLAVE_NOT_AVAILABLE
        if any(s.acked >= end for s in in_sync):
            return ReplicaOutcome.REPLICATED
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), self.sync_timeout)
        except TimeoutError:
            return ReplicaOutcome.FLUSH_SLAVE_TIMEOUT
        finally:
            if not future.done():
                future.cancel()
        return ReplicaOutcome.REPLICATED

    # -- the confirmed offset -------------------------------------------------------------

    def _update(self) -> None:
        caught_up = self._admit()
        self._watch_lag(caught_up)
        ids = frozenset(s.broker_id for s in caught_up)
        if ids != self._caught_up_ids:
            self._caught_up_ids = ids
            self.caught_up_moved()
        in_sync = [s for s in caught_up if s.counted]
        best = max((s.acked for s in in_sync), default=-1)
        if self._waiters:
            ready = [f for end, f in self._waiters if end <= best and not f.done()]
            self._waiters = [(e, f) for e, f in self._waiters if e > best and not f.done()]
            for future in ready:
                future.set_result(True)
        if self.mode is ReplicationMode.SYNC and self.role is Role.MASTER and in_sync:
            confirmed = min(s.acked for s in in_sync)
        else:
            confirmed = -1
        if confirmed >= 0:
            if self.confirmed < 0:
                self._shown = self.store.write_position
            confirmed = max(confirmed, self._shown)
        if confirmed == self.confirmed:
            return
        self.confirmed = confirmed
        self.store.set_visible_limit(confirmed if confirmed >= 0 else None)
        woken: set[tuple[str, int]] = set()
        while self._unconfirmed and (confirmed < 0 or self._unconfirmed[0][0] <= confirmed):
            woken |= self._unconfirmed.popleft()[1]
        if woken:
            self._wake(woken)

    def _watch_lag(self, caught_up: list[SlaveProgress]) -> None:
        """A slave leaves the in-sync set when its time runs out, with no acknowledgement to
        notice it (a silent slave sends nothing): look again at that moment — the confirmed
        offset must let the readers held for it go, and waiting sends must not wait for it. A
        timer due no later is kept (acknowledgements only move deadlines on; one that fires
        early looks again and sets the next)."""
        if not caught_up:
            return
        at = min(s.caught_up_at for s in caught_up) + self.max_lag_time
        if self._lag_timer is not None and self._lag_timer_at <= at:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test driving the state by hand)
            return
        if self._lag_timer is not None:
            self._lag_timer.cancel()
        self._lag_timer_at = at
        self._lag_timer = loop.call_later(max(0.0, at - self._clock()) + 0.01, self._lag_expired)

    def _lag_expired(self) -> None:
        self._lag_timer = None
        self._update()

    def latency_ms(self) -> dict[str, float]:
        """Append-to-acknowledgement time of the recent records (median, p99, max, in ms): how
        far behind the fastest slave is in time (docs/replication.md §3, "async loss window")."""
        if not self.latencies:
            return {}
        ordered = sorted(self.latencies)

        def pick(quantile: float) -> float:
            return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000

        return {"p50": pick(0.5), "p99": pick(0.99), "max": ordered[-1] * 1000}

    def lag_bytes(self) -> int:
        """How far the slowest connected slave is behind (0 without slaves)."""
        end = self.store.write_position
        return max((end - s.acked for s in self.slaves.values()), default=0)
