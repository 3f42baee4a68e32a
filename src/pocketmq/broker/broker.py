"""The broker: every operation a client can ask for, independent of the wire protocol.

It runs on one asyncio event loop. Store calls are synchronous and short (they never wait for
fsync); waiting — for a sync flush, for a long poll — is asynchronous, so one slow request never
holds up the others. Errors are raised as :mod:`pocketmq.errors` classes, whose wire codes both
protocol adapters understand; batch operations report per item.

This class is the front the adapters talk to; each concept lives in its own module
(docs/design.md, "Where each concept lives") and the front only builds them, runs the
housekeeping and hands each call to its concept.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable

from pocketmq.broker.catalog import Catalog
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumers import ConsumerRegistry
from pocketmq.broker.deadletters import DeadLetters
from pocketmq.broker.durability import DurabilityWaiter
from pocketmq.broker.flow import FlowControl
from pocketmq.broker.front import BrokerFront
from pocketmq.broker.groups import GroupManager
from pocketmq.broker.ha import HaFront
from pocketmq.broker.ha.replica_log import ReplicaLog
from pocketmq.broker.ha.replication import Replication, ReplicationMode, Role
from pocketmq.broker.ha.statecopy import StateCopy
from pocketmq.broker.history import AttemptHistory
from pocketmq.broker.locks import QueueLocks
from pocketmq.broker.longpoll import ArrivalNotifier
from pocketmq.broker.membership import Membership
from pocketmq.broker.offsets import OffsetManager
from pocketmq.broker.parts import Appender, Shared
from pocketmq.broker.persist import OffLoopWriter, private_directory
from pocketmq.broker.pop_state import PopManager
from pocketmq.broker.popping import PopPath
from pocketmq.broker.pulling import PullPath
from pocketmq.broker.redrive import RedriveService
from pocketmq.broker.resets import OffsetResets
from pocketmq.broker.roles import RoleGate
from pocketmq.broker.schedule import ScheduleService
from pocketmq.broker.sendback import SendBack
from pocketmq.broker.sending import SendPath
from pocketmq.broker.topics import TopicManager
from pocketmq.broker.traffic import Traffic
from pocketmq.broker.transactions import TransactionService
from pocketmq.store import MessageStore

__all__ = ["Broker"]

log = logging.getLogger("pocketmq.broker")


class Broker(BrokerFront):
    """One broker: a store plus topics, groups, offsets and consumption state."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.name = config.broker_name
        self._clock = clock
        self._config_dir = os.path.join(config.data_dir, "config")
        self._open_state()
        self.counters: collections.Counter[str] = collections.Counter()
        self.traffic = Traffic()
        role = Role(config.role)
        # a slave's store is a copy of its master's: it writes nothing of its own
        self.history = AttemptHistory(
            self.store, clock, enabled=config.record_history and role is Role.MASTER
        )
        shared = self._shared = self._share()
        self.consumers = shared.consumers
        self.arrivals = shared.arrivals
        self.flow = shared.flow
        self.locks = shared.locks
        self.appender = Appender(shared)
        self._build_replication(role)
        self._build_paths()
        self._tasks: list[asyncio.Task[None]] = []
        self._state_writer = OffLoopWriter()
        if role is Role.MASTER:
            self.catalog.finish_deletes()  # before offsets of a deleted topic reserve anything
            self._protect_consumed_positions()
            if self.store.epochs.current is None:
                self.store.epochs.begin(1, self.store.write_position)

    def _open_state(self) -> None:
        """Open the data directory's files: the store, then the topics, groups, offsets and pop
        state kept beside it (the store is closed again when one of those cannot be read)."""
        config, config_dir = self.config, self._config_dir
        for directory in (config.data_dir, config_dir):  # docs/security.md, "Files"
            narrowed = private_directory(directory)
            if narrowed:
                log.warning("data directory: %s", narrowed)
        self.store = MessageStore.open(
            os.path.join(config.data_dir, "store"), config.store, clock=self._clock
        )
        try:
            self.topics = TopicManager(config_dir)
            self.groups = GroupManager(config_dir)
            self.offsets = OffsetManager(config_dir)
            self.pop_state = PopManager(config_dir)
        except BaseException:
            self.store.close()
            raise

    def _share(self) -> Shared:
        """The state and the small services every part of the broker works with."""
        config, clock = self.config, self._clock
        return Shared(
            config=config,
            clock=clock,
            store=self.store,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            pop_state=self.pop_state,
            consumers=ConsumerRegistry(config.consumer_expiry),
            arrivals=ArrivalNotifier(),
            counters=self.counters,
            traffic=self.traffic,
            history=self.history,
            flow=FlowControl(
                max_queue_wait=config.max_queue_wait,
                max_pending_flushes=config.max_pending_flushes,
                max_queue_backlog=config.max_queue_backlog,
            ),
            locks=QueueLocks(config.queue_lock_expiry, clock),
            durability=DurabilityWaiter(self.store, config.store.sync_flush_timeout),
            # offsets.json lost entries (docs/storage-format.md §10): the groups that existed
            # start from the oldest message where they have no offset, never from the newest
            offsets_lost={g.name for g in self.groups.all()} if self.offsets.damaged else set(),
            started_at=clock(),
        )

    def _build_replication(self, role: Role) -> None:
        """The broker's place in its group (docs/replication.md): its role and replication, the
        replica log a slave appends to, and the gate that refuses writes a role does not allow."""
        config, shared = self.config, self._shared
        self.replication = shared.replication = Replication(
            self.store,
            role=role,
            mode=ReplicationMode(config.replication),
            max_gap=config.ha_max_gap_bytes,
            sync_timeout=config.ha_sync_timeout,
            wake=self.appender.wake_readers,
            max_lag_time=config.ha_max_lag_time,
        )
        self.replica_log = ReplicaLog(self.store, self.name)
        self.roles = shared.roles = RoleGate(self.name, self.replication, self.pop_state)

    def _build_paths(self) -> None:
        """The concepts the front hands calls to (docs/design.md, "Where each concept lives"),
        in the order they need each other, and the HA servers' front."""
        shared = self._shared
        self.sending = SendPath(shared)
        self.dead_letters = DeadLetters(shared)
        self._build_master_services()
        self.send_backs = SendBack(shared, self.dead_letters)
        self.pulls = PullPath(shared)
        self.pops = PopPath(shared, self.dead_letters)
        self.catalog = Catalog(shared)
        self.membership = Membership(shared)
        self.resets = OffsetResets(shared)
        self.state_copy = StateCopy(
            self._config_dir,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            pop_state=self.pop_state,
            is_slave=lambda: self.role is Role.SLAVE,
        )
        self.ha = HaFront(self.replication, self.replica_log, self.state_copy)

    def _build_master_services(self) -> None:
        """The services that write on their own: the schedule, the transaction checker, DLQ
        redrives. Built from the state files, at start and again at a promotion (a slave's
        files are its master's latest)."""
        shared, appender, config, clock = self._shared, self.appender, self.config, self._clock
        self.redrives = RedriveService(
            self.store,
            self._config_dir,
            send_now=self.sending.send_now,
            append_now=appender.append_now,
            settle=self.sending.settle,
            history=self.history,
            clock=clock,
        )
        self.dead_letters.redrives = self.redrives
        self.schedule = shared.schedule = ScheduleService(
            self.store,
            self._config_dir,
            config.delay_levels,
            appender.append_internal,
            clock,
            counters=self.counters,
            dead_letter=lambda group, message, reason: (
                self.dead_letters.dead_letter(group, message, reason=reason).status.stored
            ),
        )
        self.transactions = shared.transactions = TransactionService(
            self.store,
            self._config_dir,
            timeout=config.transaction_timeout,
            check_interval=config.transaction_check_interval,
            check_max=config.transaction_check_max,
            producer_expiry=config.consumer_expiry,
            append=appender.append_now,
            durable=appender.await_durable,
            history=self.history,
            counters=self.counters,
            clock=clock,
        )

    def _protect_consumed_positions(self) -> None:
        """After a crash that lost the tail of a queue, the queue must not hand out again the
        offsets that consumers (groups, pop state, the scheduler, the transaction checker)
        already moved past: they would never see the new messages there
        (docs/storage-format.md §6)."""
        positions = self.offsets.furthest()
        for (_, topic, queue_id), state in self.pop_state.items():
            key = (topic, queue_id)
            positions[key] = max(positions.get(key, 0), state.next_offset)
        for source in (self.schedule.consumed_positions(), self.transactions.consumed_positions()):
            for key, offset in source.items():
                positions[key] = max(positions.get(key, 0), offset)
        for (topic, queue_id), offset in positions.items():
            if offset > self.store.max_offset(topic, queue_id):
                self.store.reserve_queue_offset(topic, queue_id, offset)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        """Master or slave: a slave stores only what its master replicates and runs no schedules or
        checks of its own."""
        return self.replication.role

    async def start(self) -> None:
        """Start the background work (schedules and transaction checks on a master, flow control,
        housekeeping) after the state was recovered."""
        if self.role is Role.MASTER:  # a slave's schedules and checks run on its master
            await self._start_master_services()
        self.flow.start()
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="broker-housekeeping"))
        self._tasks.append(
            asyncio.create_task(self.history.drain_forever(), name="broker-history-intake")
        )

    async def serving(self) -> None:
        """The servers are up: lift the "starting" refusal of writes, and restart flow control's
        measures, since the stalls of starting are not overload (FlowControl.restart)."""
        await self.flow.restart()
        self.replication.starting = ""

    async def _start_master_services(self) -> None:
        await self.schedule.start()
        await self.transactions.start()

    async def close(self) -> None:
        """Stop the background work and persist offsets, pop state, schedule progress and the store,
        so a restart continues where this one stopped."""
        if self._shared.closed:
            return
        self._shared.closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._state_writer.drain()
        self.arrivals.notify_all()
        await self.flow.stop()
        await self.schedule.close()
        await self.transactions.close()
        self.history.flush()
        self.offsets.persist(force=True)
        self.pop_state.persist(force=True)
        self.store.close()

    async def _housekeeping(self) -> None:
        last_offsets = last_maintenance = self._clock()
        while True:
            await asyncio.sleep(self.config.state_persist_interval)
            now = self._clock()
            try:
                self.consumers.expire(now)
                if self.role is Role.MASTER:  # moving expired messages to a DLQ writes
                    self.pops.revive(now)
                self.pops.sweep_attempts()
                writes: list[tuple[str, bytes]] = []
                self.pop_state.persist(sink=writes.append)
                self.schedule.persist(sink=writes.append)
                self.history.tick()
                # an interval "passes" also when the wall clock stepped back behind its start:
                # else a step back of an hour stops these for an hour (docs/operations.md)
                if not 0 <= now - last_offsets < self.config.offset_persist_interval:
                    self.offsets.persist(sink=writes.append)
                    last_offsets = now
                await self._state_writer.write(writes)
                if not 0 <= now - last_maintenance < 60:
                    self.store.run_maintenance(now)
                    last_maintenance = now
            except Exception:  # keep the loop alive; the next round retries
                log.exception("broker housekeeping failed")

    # -- roles (docs/replication.md §5-§6) -----------------------------------------------

    async def promote(self, epoch: int | None = None) -> int:
        """Become the master of the group: a new epoch at the log's end (``epoch`` when the
        controller granted one, docs/replication.md §9), the state the master last sent, and the
        services that write. Returns the new epoch."""
        if self.role is Role.MASTER:
            current = self.store.epochs.current
            return current.number if current else 0
        epochs = self.store.epochs
        current = epochs.current
        epochs.truncate(self.store.write_position)  # terms whose records never reached us
        number = (current.number if current else 0) + 1
        epoch = epochs.begin(max(number, epoch or 0), self.store.write_position).number
        self.topics.reload()
        self.groups.reload()
        self.offsets.merge_file()
        if not self.replication.acting:  # else its own pop state is the newest there is
            self.pop_state.reload()
        self.replication.acting = False
        self.replication.role = Role.MASTER
        self.catalog.finish_deletes()  # a topic delete the old master began
        self.history.enabled = self.config.record_history
        self._build_master_services()
        await self._start_master_services()
        log.warning("promoted to master of group %r at epoch %d", self.name, epoch)
        return epoch

    async def demote(self) -> None:
        """Become a slave: another broker holds a newer epoch of this group (the caller then
        replicates from it, which cuts what this log has beyond their shared history)."""
        if self.role is Role.SLAVE:
            return
        self.replication.role = Role.SLAVE
        self.history.enabled = False
        await self.schedule.close()
        await self.transactions.close()
        log.warning("demoted to slave of group %r", self.name)
