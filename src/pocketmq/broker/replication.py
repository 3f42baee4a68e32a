"""A broker's place in its group: master or slave, its slaves' progress, and what a send waits for.

The wire side of replication is the server's (server/ha); this module holds what the broker core
decides with it (docs/replication.md):

- which slaves are **in sync**: connected, members of the group (etcd's member list under a
  controller), within ``ha_max_gap_bytes`` of the master's end, and not lacking any record for
  longer than ``ha_sync_timeout`` — a slave that stops acknowledging drops out by a time bound,
  so it never holds sends and readers longer than that (docs/replication.md §2, "Membership");
- what a ``SYNC`` send waits for: an in-sync slave's acknowledgement of the record, at most
  ``ha_sync_timeout``; with no slave in sync it is answered at once with SLAVE_NOT_AVAILABLE;
- the **confirmed offset** readers may read up to, so what a failover could discard is never
  delivered, and waking the long polls of the queues whose messages it makes readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.store import MessageStore

__all__ = ["ReplicaOutcome", "Replication", "ReplicationMode", "Role", "SlaveProgress"]

_LATENCY_WINDOW = 10_000
"""Records whose replication latency is remembered (status shows their percentiles)."""


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
    # the in-sync time rule: since when (monotonic) the master holds records this slave has not
    # acknowledged (None: it holds them all), and a checkpoint (the master's end, when) that an
    # acknowledgement reaching it moves that time on to
    behind_since: float | None = None
    checkpoint: tuple[int, float] | None = None


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._clock = clock
        self._role = role
        store.replica_of = "the group's master" if role is Role.SLAVE else ""
        self.mode = mode
        self.max_gap = max_gap
        self.sync_timeout = sync_timeout
        self._wake = wake
        self.slaves: dict[object, SlaveProgress] = {}
        # the broker ids etcd lists as members of the group (None: no controller, every
        # authenticated slave of the group counts); set by server/ha/members.py
        self.members: frozenset[int] | None = None
        self.links_refused = 0  # replication links refused (no key, a wrong one, a non-member)
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = 0.0
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._unconfirmed: deque[tuple[int, set[tuple[str, int]]]] = deque()
        self.confirmed = -1  # -1: no limit (no slave in sync, or async replication)
        self._growth: asyncio.Future[None] | None = None
        # append time of recent log ends, and the latest append-to-acknowledgement times
        self._appended: deque[tuple[int, float]] = deque()
        self.latencies: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self.chunks_sent = 0  # HA_DATA frames with records, to every slave
        self.bytes_sent = 0
        # a master that has not yet heard from the name server that no newer master exists
        # refuses writes with this reason ("" when it may write): docs/replication.md §6
        self.fence = ""
        # with a controller (docs/replication.md §9): writes only until this monotonic time (None:
        # no lease limit), the reason past it, and whether this broker reaches etcd now
        self.lease_until: float | None = None
        self.lease_lost = ""
        # etcd is unreachable from the whole group: writes go on only while every in-sync slave is
        # linked and says it cannot reach etcd either (nobody can be elected meanwhile)
        self.without_controller = False
        self.reaches_controller: bool | None = None
        self.controller: dict[str, object] = {}  # the failover's view, for status (server/ha)
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
        """Why this master must not take a write now ("" when it may): a fence set at start-up
        (§6), or a controller lease that may have expired (§9)."""
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

    def slave_connected(self, key: object, broker_id: int, address: str, position: int) -> None:
        """A slave finished its handshake at ``position``: track its progress from there."""
        self.slaves[key] = SlaveProgress(broker_id, address, acked=position, flushed=position)
        self._update()

    def slave_gone(self, key: object) -> None:
        """A slave disconnected: it no longer counts as in sync."""
        self.slaves.pop(key, None)
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
        self._caught_up_to(slave)
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

    def in_sync(self) -> list[SlaveProgress]:
        """The slaves a SYNC send may wait for: members, within ``max_gap`` bytes of the master's
        end, and lacking no record for longer than ``sync_timeout`` (module doc)."""
        end = self.store.write_position
        now = self._clock()
        found = []
        for slave in self.slaves.values():
            if not self.is_member(slave.broker_id) or end - slave.acked > self.max_gap:
                continue
            if slave.acked < end:
                if slave.behind_since is None:  # noticed now (the append did not say)
                    slave.behind_since, slave.checkpoint = now, (end, now)
                elif now - slave.behind_since > self.sync_timeout:
                    continue
            found.append(slave)
        return found

    def _caught_up_to(self, slave: SlaveProgress) -> None:
        """Move the slave's ``behind_since`` on after an acknowledgement: all of it when it holds
        the master's end, else to the checkpoint's time once it holds the checkpoint's end
        (everything it lacks was appended after that)."""
        end = self.store.write_position
        if slave.acked >= end:
            slave.behind_since = slave.checkpoint = None
            return
        now = self._clock()
        checkpoint = slave.checkpoint
        if checkpoint is not None and slave.acked >= checkpoint[0]:
            slave.behind_since, slave.checkpoint = checkpoint[1], (end, now)
        elif slave.behind_since is None:
            slave.behind_since, slave.checkpoint = now, (end, now)

    def grew(self, end: int = 0) -> None:
        """The log grew to ``end``: wake the senders streaming it to slaves, and note when, for
        the replication latency (the first acknowledgement covering ``end``)."""
        if end and self.slaves:
            self._appended.append((end, time.monotonic()))
            if len(self._appended) > _LATENCY_WINDOW:
                self._appended.popleft()
            now = self._clock()
            for slave in self.slaves.values():
                if slave.behind_since is None and slave.acked < end:
                    slave.behind_since, slave.checkpoint = now, (end, now)
            self._arm_expiry()
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

    def _arm_expiry(self) -> None:
        """Re-evaluate the in-sync set when the next lagging slave's time runs out: nothing else
        may happen then (a silent slave sends nothing), and readers held to its position must
        be let go (the confirmed offset)."""
        now = self._clock()
        deadlines = [
            s.behind_since + self.sync_timeout
            for s in self.slaves.values()
            if s.behind_since is not None and s.behind_since + self.sync_timeout >= now
        ]
        if not deadlines:
            return
        at = min(deadlines)
        if self._expiry is not None and self._expiry_at <= at:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in a loop (a unit test's direct call): nothing to wake
            return
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_at = at
        self._expiry = loop.call_later(at - now + 0.001, self._expired)

    def _expired(self) -> None:
        self._expiry = None
        self._update()

    def _update(self) -> None:
        in_sync = self.in_sync()
        self._arm_expiry()
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
        if confirmed == self.confirmed:
            return
        self.confirmed = confirmed
        self.store.set_visible_limit(confirmed if confirmed >= 0 else None)
        woken: set[tuple[str, int]] = set()
        while self._unconfirmed and (confirmed < 0 or self._unconfirmed[0][0] <= confirmed):
            woken |= self._unconfirmed.popleft()[1]
        if woken:
            self._wake(woken)

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
