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
import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from pocketmq.broker.catalog import Catalog
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumers import ConsumerRegistry
from pocketmq.broker.deadletters import DeadLetters
from pocketmq.broker.durability import DurabilityWaiter
from pocketmq.broker.flow import FlowControl
from pocketmq.broker.groups import GroupManager
from pocketmq.broker.history import AttemptHistory
from pocketmq.broker.locks import QueueLocks
from pocketmq.broker.longpoll import ArrivalNotifier
from pocketmq.broker.membership import Membership
from pocketmq.broker.offsets import OffsetManager
from pocketmq.broker.parts import BrokerPart, Shared
from pocketmq.broker.persist import OffLoopWriter, private_directory
from pocketmq.broker.pop import PopManager
from pocketmq.broker.popping import PopPath
from pocketmq.broker.pulling import PullPath
from pocketmq.broker.redrive import RedriveService
from pocketmq.broker.replica_log import ReplicaLog
from pocketmq.broker.replication import Replication, ReplicationMode, Role
from pocketmq.broker.resets import OffsetResets
from pocketmq.broker.schedule import ScheduleService
from pocketmq.broker.sendback import SendBack
from pocketmq.broker.sending import SendPath
from pocketmq.broker.statecopy import StateCopy
from pocketmq.broker.topics import TopicManager
from pocketmq.broker.traffic import Traffic
from pocketmq.broker.transactions import TransactionService
from pocketmq.errors import ServiceUnavailableError
from pocketmq.model.transactions import EndOutcome, TransactionStatus
from pocketmq.store import MessageStore

__all__ = ["Broker"]

log = logging.getLogger("pocketmq.broker")


class Broker:
    """One broker: a store plus topics, groups, offsets and consumption state."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.name = config.broker_name
        self._clock = clock
        config_dir = os.path.join(config.data_dir, "config")
        for directory in (config.data_dir, config_dir):  # docs/security.md, "Files"
            narrowed = private_directory(directory)
            if narrowed:
                log.warning("data directory: %s", narrowed)
        self.store = MessageStore.open(
            os.path.join(config.data_dir, "store"), config.store, clock=clock
        )
        try:
            self.topics = TopicManager(config_dir)
            self.groups = GroupManager(config_dir)
            self.offsets = OffsetManager(config_dir)
            self.pop_state = PopManager(config_dir)
        except BaseException:
            self.store.close()
            raise
        self.counters: collections.Counter[str] = collections.Counter()
        self.traffic = Traffic()
        role = Role(config.role)
        # a slave's store is a copy of its master's: it writes nothing of its own
        self.history = AttemptHistory(
            self.store, clock, enabled=config.record_history and role is Role.MASTER
        )
        shared = Shared(
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
        self._shared = shared
        self.consumers = shared.consumers
        self.arrivals = shared.arrivals
        self.flow = shared.flow
        self.locks = shared.locks
        steps = BrokerPart(shared)
        self.replication = shared.replication = Replication(
            self.store,
            role=role,
            mode=ReplicationMode(config.replication),
            max_gap=config.ha_max_gap_bytes,
            sync_timeout=config.ha_sync_timeout,
            wake=steps.wake_readers,
            max_lag_time=config.ha_max_lag_time,
        )
        self.replica_log = ReplicaLog(self.store, self.name)
        self.sending = SendPath(shared)
        self._config_dir = config_dir
        self._steps = steps
        self.dead_letters = DeadLetters(shared)
        self._build_master_services()
        self.send_backs = SendBack(shared, self.dead_letters)
        self.pulls = PullPath(shared)
        self.pops = PopPath(shared, self.dead_letters)
        self.catalog = Catalog(shared)
        self.membership = Membership(shared)
        self.resets = OffsetResets(shared)
        self.state_copy = StateCopy(
            config_dir,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            pop_state=self.pop_state,
            is_slave=lambda: self.role is Role.SLAVE,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._state_writer = OffLoopWriter()
        if role is Role.MASTER:
            self.catalog.finish_deletes()  # before offsets of a deleted topic reserve anything
            self._protect_consumed_positions()
            if self.store.epochs.current is None:
                self.store.epochs.begin(1, self.store.write_position)
        self._bind()

    def _build_master_services(self) -> None:
        """The services that write on their own: the schedule, the transaction checker, DLQ
        redrives. Built from the state files, at start and again at a promotion (a slave's
        files are its master's latest)."""
        shared, steps, config, clock = self._shared, self._steps, self.config, self._clock
        self.redrives = RedriveService(
            self.store,
            self._config_dir,
            send_now=self.sending.send_now,
            append_now=steps._append_now,
            settle=self.sending.settle,
            history=self.history,
            clock=clock,
        )
        self.dead_letters.redrives = self.redrives
        self.schedule = shared.schedule = ScheduleService(
            self.store,
            self._config_dir,
            config.delay_levels,
            steps.append_internal,
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
            append=steps._append_now,
            durable=steps._await_durable,
            history=self.history,
            counters=self.counters,
            clock=clock,
        )

    def _bind(self) -> None:
        """The operations adapters call, taken from the concept that implements each."""
        sending, pops, catalog, membership = self.sending, self.pops, self.catalog, self.membership
        self.send = sending.send
        self.send_now = sending.send_now
        self.send_now_many = sending.send_now_many
        self.settle = sending.settle
        self.recall = sending.recall
        self.append_internal = sending.append_internal
        self.send_back = self.send_backs.send_back
        self.pull = self.pulls.pull
        self.pull_now = self.pulls.pull_now
        self.commit_offsets = self.pulls.commit_offsets
        self.query_offset = self.pulls.query_offset
        self.pop = pops.pop
        self.pop_now = pops.pop_now
        self.ack = pops.ack
        self.change_invisible = pops.change_invisible
        self.dead_letter = self.dead_letters.dead_letter
        self.forward_to_dead_letter = self.dead_letters.forward_to_dead_letter
        self.redrive = self.dead_letters.redrive
        self.redriven = self.dead_letters.redriven
        self.create_topic = catalog.create_topic
        self.update_topic = catalog.update_topic
        self.delete_topic = catalog.delete_topic
        self.create_group = catalog.create_group
        self.delete_group = catalog.delete_group
        self.require_group = catalog.require_group
        self.report_outcomes = catalog.report_outcomes
        self.message_history = catalog.message_history
        self.browse = catalog.browse
        self.query_messages = catalog.query_messages
        self.queue_status = catalog.queue_status
        self.status = catalog.status
        self.heartbeat = membership.heartbeat
        self.unregister = membership.unregister
        self.lock_queues = membership.lock_queues
        self.unlock_queues = membership.unlock_queues
        self.consumer_ids = membership.consumer_ids
        self.heartbeat_producer = membership.heartbeat_producer
        self.unregister_producer = membership.unregister_producer
        self.reset_offsets = self.resets.reset
        for name in self.MASTER_ONLY:
            setattr(self, name, self._master_only(name, getattr(self, name)))
        for name in self.POPS:
            setattr(self, name, self._pop_guard(getattr(self, name)))

    MASTER_ONLY = (
        "send_back",
        "dead_letter",
        "forward_to_dead_letter",
        "redrive",
        "create_topic",
        "update_topic",
        "delete_topic",
        "create_group",
        "delete_group",
        "reset_offsets",
    )
    """Operations that write the log or the state a master owns (docs/replication.md §5): a
    slave refuses them, like sends, and the client goes to a master."""

    POPS = ("pop", "pop_now", "ack", "change_invisible")
    """Pop operations: a master serves them; a slave only while its master is away (it
    acts for it, docs/replication.md §5), from the master's last pop state."""

    def _pop_guard(self, operation: Callable[..., Any]) -> Callable[..., Any]:
        replication = self.replication

        def admit() -> None:
            refusal = replication.write_refusal()
            if refusal:
                raise ServiceUnavailableError(refusal)
            if replication.role is Role.MASTER:
                return
            if replication.master_address:
                raise ServiceUnavailableError(
                    f"broker {self.name!r} is a slave and its master is up: pop from the master"
                )
            if not replication.acting:
                self.pop_state.reload()  # the master's last copy
                replication.acting = True
                log.warning("serving pops for the absent master of group %r", self.name)

        if inspect.iscoroutinefunction(operation):

            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                admit()
                return await operation(*args, **kwargs)

            return guarded_async

        def guarded(*args: Any, **kwargs: Any) -> Any:
            admit()
            return operation(*args, **kwargs)

        return guarded

    def _master_only(self, name: str, operation: Callable[..., Any]) -> Callable[..., Any]:
        def refuse() -> ServiceUnavailableError:
            return ServiceUnavailableError(
                f"broker {self.name!r} is a slave: {name.replace('_', ' ')} goes to its master"
            )

        if inspect.iscoroutinefunction(operation):

            async def checked_async(*args: Any, **kwargs: Any) -> Any:
                if self.replication.role is Role.SLAVE:
                    raise refuse()
                refusal = self.replication.write_refusal()
                if refusal:
                    raise ServiceUnavailableError(refusal)
                return await operation(*args, **kwargs)

            return checked_async

        def checked(*args: Any, **kwargs: Any) -> Any:
            if self.replication.role is Role.SLAVE:
                raise refuse()
            refusal = self.replication.write_refusal()
            if refusal:
                raise ServiceUnavailableError(refusal)
            return operation(*args, **kwargs)

        return checked

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

    # -- transactions (broker/transactions.py) --------------------------------------------

    async def end_transaction(
        self,
        producer_group: str,
        message_id: str,
        transaction_id: str,
        *,
        commit: bool,
        from_check: bool = False,
        topic: str = "",
        by: str = "",
    ) -> EndOutcome:
        """Commit or roll back a half message named by its producer group, topic, message id and
        transaction id (all must match: TransactionStateError otherwise). The first outcome is
        final: the same outcome again is answered as a duplicate, a different one raises
        TransactionStateError. ``by``: the authenticated user, recorded with the outcome."""
        if self._shared.closed:
            raise ServiceUnavailableError("the broker is shutting down")
        if self.role is Role.SLAVE:
            raise ServiceUnavailableError(
                f"broker {self.name!r} is a slave: end transactions on its master"
            )
        return await self.transactions.end(
            producer_group,
            message_id,
            transaction_id,
            commit=commit,
            from_check=from_check,
            topic=topic,
            by=by,
        )

    def transaction_state(self, message_id: str) -> TransactionStatus | None:
        """The broker's record of a message's transaction, or None (``QUERY_TRANSACTION``)."""
        return self.transactions.state(message_id)
