"""The broker core: every operation a client can ask for, independent of the wire protocol.

It runs on one asyncio event loop. Store calls are synchronous and short (they never wait for
fsync); waiting — for a sync flush, for a long poll — is asynchronous, so one slow request never
holds up the others. Errors are raised as :mod:`pocketmq.errors` classes, whose wire codes both
protocol adapters understand; batch operations report per item.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence

import msgspec

from pocketmq import properties as props
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumers import ConsumerRegistry, Notify
from pocketmq.broker.durability import DurabilityWaiter
from pocketmq.broker.filtering import parse_tag_expression
from pocketmq.broker.flow import FlowControl
from pocketmq.broker.groups import ConsumeFrom, GroupConfig, GroupManager
from pocketmq.broker.history import HISTORY_TOPIC, Attempt, AttemptHistory, Outcome
from pocketmq.broker.locks import QueueLocks
from pocketmq.broker.longpoll import ArrivalNotifier
from pocketmq.broker.model import Delivered, InboundMessage, PullOutcome, PullStatus, SendOutcome
from pocketmq.broker.offsets import OffsetManager
from pocketmq.broker.persist import OffLoopWriter
from pocketmq.broker.pop import Handle, InFlight, PopBatch, PopManager, PopQueue
from pocketmq.broker.producers import CheckChannel
from pocketmq.broker.redrive import REDRIVE_AUDIT_TOPIC, RedriveService
from pocketmq.broker.schedule import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    ScheduleService,
    make_recall_handle,
    parse_recall_handle,
)
from pocketmq.broker.topics import (
    DLQ_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_PREFIX,
    TopicConfig,
    TopicManager,
    TopicType,
    dlq_topic,
    retry_topic,
)
from pocketmq.broker.transactions import (
    HALF_TOPIC,
    EndOutcome,
    TransactionService,
    TransactionStatus,
)
from pocketmq.errors import (
    BrokerError,
    Code,
    GroupNotFoundError,
    InvalidArgumentError,
    MessageIllegalError,
    MessageNotFoundError,
    MessageTooLargeError,
    NoPermissionError,
    ServiceUnavailableError,
    TooManyRequestsError,
    TopicNotFoundError,
    error_from_code,
)
from pocketmq.ids import new_message_id
from pocketmq.routing import queue_for_group
from pocketmq.store import (
    FlushMode,
    GetStatus,
    MessageStore,
    PutResult,
    PutStatus,
    StoredMessage,
    StoreMessage,
    pack_host,
)

__all__ = ["Broker"]

log = logging.getLogger("pocketmq.broker")


_PUT_CODES = {
    PutStatus.PUT_OK: Code.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.FLUSH_DISK_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: Code.MESSAGE_ILLEGAL,
    PutStatus.MESSAGE_TOO_LARGE: Code.MESSAGE_TOO_LARGE,
    PutStatus.PROPERTIES_TOO_LARGE: Code.MESSAGE_TOO_LARGE,
    PutStatus.OS_PAGE_CACHE_BUSY: Code.TOO_MANY_REQUESTS,
    PutStatus.DISK_FULL: Code.STORAGE_FULL,
    PutStatus.SERVICE_NOT_AVAILABLE: Code.SERVICE_NOT_AVAILABLE,
    PutStatus.OUT_OF_RESOURCES: Code.SYSTEM_BUSY,
    PutStatus.STORE_FAILED: Code.STORAGE_FAILED,
    PutStatus.UNKNOWN_ERROR: Code.SYSTEM_ERROR,
}


_SCHEDULE_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
_HELD_TOPICS = _SCHEDULE_TOPICS | {HALF_TOPIC}  # stored aside; the real topic is a property
# Internal ledgers that have no topic config but may be browsed (exports): name -> queue count.
_BROWSABLE_INTERNAL = {HISTORY_TOPIC: 1, REDRIVE_AUDIT_TOPIC: 1}
_SKIPPABLE = (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING)


def _require_dead_letter_stored(result: PutResult) -> None:
    """Raise the client-facing error when the store refused a dead letter."""
    if not result.status.stored:
        raise error_from_code(
            _PUT_CODES[result.status],
            f"storing the dead letter failed: {result.reason or result.status.value}",
        )


class Broker:
    """One broker: a store plus topics, groups, offsets and consumption state."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.name = config.broker_name
        self._clock = clock
        config_dir = os.path.join(config.data_dir, "config")
        os.makedirs(config_dir, exist_ok=True)
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
        # offsets.json lost entries (docs/storage-format.md §10): the groups that existed start
        # from the oldest message where they have no offset, never from the newest
        self._offsets_lost = {g.name for g in self.groups.all()} if self.offsets.damaged else set()
        self.consumers = ConsumerRegistry(config.consumer_expiry)
        self.arrivals = ArrivalNotifier()
        self.counters: collections.Counter[str] = collections.Counter()
        self._durability = DurabilityWaiter(self.store, config.store.sync_flush_timeout)
        self._sync_flush = config.store.flush_mode is FlushMode.SYNC
        self._round_robin: dict[str, int] = {}
        self._hosts: dict[str, bytes] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._state_writer = OffLoopWriter()
        self._closed = False
        self.schedule = ScheduleService(
            self.store,
            config_dir,
            config.delay_levels,
            self.append_internal,
            clock,
            counters=self.counters,
            dead_letter=lambda group, message, reason: (
                self.dead_letter(group, message, reason=reason).status.stored
            ),
        )
        self.history = AttemptHistory(self.store, clock, enabled=config.record_history)
        self.transactions = TransactionService(
            self.store,
            config_dir,
            timeout=config.transaction_timeout,
            check_interval=config.transaction_check_interval,
            check_max=config.transaction_check_max,
            producer_expiry=config.consumer_expiry,
            append=self._append_now,
            durable=self._await_durable,
            history=self.history,
            counters=self.counters,
            clock=clock,
        )
        self.redrives = RedriveService(
            self.store,
            config_dir,
            send_now=self.send_now,
            append_now=self._append_now,
            wait_durable=self.wait_durable,
            history=self.history,
            clock=clock,
        )
        self.flow = FlowControl(
            max_queue_wait=config.max_queue_wait,
            max_pending_flushes=config.max_pending_flushes,
            max_queue_backlog=config.max_queue_backlog,
        )
        self._faults = dict(config.fault_injection)
        self.locks = QueueLocks(config.queue_lock_expiry, clock)
        self._slowest: dict[tuple[str, int], tuple[float, int]] = {}
        self._protect_consumed_positions()

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

    async def start(self) -> None:
        await self.schedule.start()
        await self.transactions.start()
        self.flow.start()
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="broker-housekeeping"))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
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
                self._revive(now)
                writes: list[tuple[str, bytes]] = []
                self.pop_state.persist(sink=writes.append)
                self.schedule.persist(sink=writes.append)
                self.history.flush()
                if now - last_offsets >= self.config.offset_persist_interval:
                    self.offsets.persist(sink=writes.append)
                    last_offsets = now
                await self._state_writer.write(writes)
                if now - last_maintenance >= 60:
                    self.store.run_maintenance(now)
                    last_maintenance = now
            except Exception:  # keep the loop alive; the next round retries
                log.exception("broker housekeeping failed")

    # -- topics and groups ----------------------------------------------------------------

    def create_topic(
        self, name: str, *, queues: int | None = None, topic_type: str = "normal", perm: int = 6
    ) -> TopicConfig:
        try:
            kind = TopicType(topic_type)
        except ValueError:
            raise InvalidArgumentError(
                f"topic type {topic_type!r} is not one of normal, fifo, delay, transaction"
            ) from None
        return self.topics.create(
            name, queues=queues or self.config.default_queues, topic_type=kind, perm=perm
        )

    def delete_topic(self, name: str) -> None:
        topic = self.topics.require(name)
        if topic.system:
            raise InvalidArgumentError(f"{name!r} is a system topic")
        result = self.store.delete_topic(name)
        if not result.status.stored:
            raise error_from_code(
                _PUT_CODES[result.status],
                f"topic {name!r} was not deleted: {result.reason or result.status.value}",
            )
        self.topics.delete(name)
        self.offsets.forget_topic(name)
        self.offsets.persist(force=True)  # a re-created topic must not inherit old offsets
        self.pop_state.forget(topic=name)

    def create_group(self, group: GroupConfig) -> GroupConfig:
        retry = group.retry
        if group.fifo and not retry.delays and retry.initial <= 0:
            # seed 002: FIFO groups retry on 1s 5s 10s 30s 1m ... 2h (the delay levels from 1)
            group = msgspec.structs.replace(
                group, retry=msgspec.structs.replace(retry, delays=self.config.delay_levels)
            )
        created = self.groups.create(group)
        self.topics.ensure_system(
            retry_topic(group.name), max(1, group.retry_queues), PERM_READ | PERM_WRITE
        )
        return created

    def delete_group(self, name: str) -> None:
        self.groups.require(name)
        self.groups.delete(name)
        self.offsets.forget_group(name)
        self.pop_state.forget(group=name)

    def _group(self, name: str) -> GroupConfig:
        group = self.groups.get(name)
        if group is None:
            if self.config.auto_create_groups:
                return self.create_group(GroupConfig(name=name))
            raise GroupNotFoundError(
                f"consumer group {name!r} does not exist; create it with "
                f"`pocketmq group create {name}`"
            )
        return group

    def _writable_topic(self, name: str) -> TopicConfig:
        topic = self.topics.get(name)
        if topic is None:
            if self.config.auto_create_topics and not name.startswith(("%",)):
                return self.create_topic(name)
            raise TopicNotFoundError(
                f"topic {name!r} does not exist; create it with `pocketmq topic create {name}`"
            )
        if not topic.writable:
            raise NoPermissionError(f"topic {name!r} is not writable")
        return topic

    def _readable_topic(self, name: str, group: str) -> TopicConfig:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicNotFoundError(
                f"topic {name!r} does not exist; create it with `pocketmq topic create {name}`"
            )
        if name.startswith(DLQ_PREFIX):
            raise NoPermissionError(
                f"{name!r} is a dead-letter topic: normal consumers cannot read it; "
                "use `pocketmq dlq list` / `pocketmq dlq resend`"
            )
        if name.startswith(RETRY_PREFIX) and name != retry_topic(group):
            raise NoPermissionError(f"{name!r} belongs to another consumer group")
        if not topic.readable:
            raise NoPermissionError(f"topic {name!r} is not readable")
        return topic

    # -- send -----------------------------------------------------------------------------

    async def send(
        self,
        messages: Sequence[InboundMessage],
        *,
        producer_group: str = "",
        born_host: str = "",
    ) -> list[SendOutcome]:
        """Store a batch; one outcome per message, in order (waits for a sync flush)."""
        outcomes, durable_end = self.send_now(
            messages, producer_group=producer_group, born_host=born_host
        )
        if durable_end:
            return await self.wait_durable(outcomes, durable_end)
        return outcomes

    def send_now(
        self,
        messages: Sequence[InboundMessage],
        *,
        producer_group: str = "",
        born_host: str = "",
    ) -> tuple[list[SendOutcome], int]:
        """Store a batch without waiting. Returns the outcomes and, in sync-flush mode, the log
        offset that must be durable before they may be acknowledged (0: nothing to wait for)."""
        if len(messages) > self.config.max_batch_messages:
            raise InvalidArgumentError(
                f"a batch holds at most {self.config.max_batch_messages} messages"
            )
        if self._closed:
            raise ServiceUnavailableError("the broker is shutting down")
        overload = self.flow.overload_reason(self.store.busy)
        if overload is not None:
            self.flow.rejected += len(messages)
            raise TooManyRequestsError(f"flow control: {overload}; back off and retry")
        outcomes: list[SendOutcome | None] = [None] * len(messages)
        accepted: list[int] = []
        to_store: list[StoreMessage] = []
        host = self._hosts.get(born_host)
        if host is None:
            host = self._hosts[born_host] = pack_host(born_host)
        for number, message in enumerate(messages):
            try:
                to_store.append(self._prepare(message, host, producer_group))
            except BrokerError as exc:
                outcomes[number] = SendOutcome(code=exc.code, remark=str(exc), topic=message.topic)
                continue
            accepted.append(number)
        durable_end = 0
        if to_store:
            results = self.store.append(to_store)
            self.transactions.stored(to_store, results)
            touched: set[tuple[str, int]] = set()
            for number, stored, result in zip(accepted, to_store, results, strict=True):
                outcomes[number] = self._outcome(stored, result)
                if result.status.stored:
                    touched.add((stored.topic, stored.queue_id))
                    if self._sync_flush:
                        durable_end = max(durable_end, result.physical_offset + result.size)
            self._wake(touched)
            self.counters["messages_in"] += sum(r.status.stored for r in results)
        return [o for o in outcomes if o is not None], durable_end

    async def wait_durable(self, outcomes: list[SendOutcome], end: int) -> list[SendOutcome]:
        """Wait for the sync flush covering ``end``; a timeout turns successes into
        FLUSH_DISK_TIMEOUT (stored, not yet known durable)."""
        self.flow.pending_flushes += 1
        try:
            durable = await self._durability.wait(end)
        finally:
            self.flow.pending_flushes -= 1
        if durable:
            return outcomes
        code, remark = Code.FLUSH_DISK_TIMEOUT, "stored, not yet flushed"
        if self.store.failure:  # the fsync failed: maybe not stored at all (storage-format §5)
            code, remark = Code.STORAGE_FAILED, self.store.failure
        return [
            msgspec.structs.replace(o, code=code, remark=remark) if o.code is Code.SUCCESS else o
            for o in outcomes
        ]

    def _prepare(
        self, message: InboundMessage, host: bytes, producer_group: str = ""
    ) -> StoreMessage:
        topic = self._writable_topic(message.topic)
        body = message.body
        if not body:
            raise MessageIllegalError("message body is empty")
        limit = self.config.store.max_message_size
        if len(body) > limit:
            raise MessageTooLargeError(f"message body is {len(body)} bytes; the limit is {limit}")
        properties = message.properties
        if not properties.get(props.MESSAGE_ID):
            properties = {**properties, props.MESSAGE_ID: new_message_id()}
        queue_id = self._select_queue(topic, message.queue_id, properties.get(props.MESSAGE_GROUP))
        if self.flow.max_queue_backlog is not None and not topic.system:
            backlog = self._backlog(topic.name, queue_id)
            if self.flow.backlog_exceeded(backlog):
                self.flow.rejected += 1
                raise TooManyRequestsError(
                    f"flow control: queue {topic.name}/{queue_id} holds {backlog} unconsumed "
                    f"messages (cap {self.flow.max_queue_backlog}); back off and retry"
                )
        now_ms = int(self._clock() * 1000)
        stored = StoreMessage(
            topic=topic.name,
            queue_id=queue_id,
            body=body,
            properties=properties,
            flags=message.flags,
            born_timestamp=message.born_timestamp or now_ms,
            born_host=host,
        )
        if topic.name.startswith(RETRY_PREFIX):
            stored = self._resent_retry(stored)
        elif self.transactions.is_transactional(stored):
            return self.transactions.hold(stored, producer_group)  # a half message
        return self._delay(stored, now_ms)

    def _resent_retry(self, message: StoreMessage) -> StoreMessage:
        """A consumer re-sent a failed message to its retry topic (its send-back failed):
        carry the reconsume count, and dead-letter it once the retries are used up."""
        if self._fault("retry_send"):
            raise BrokerError("injected retry-topic send failure (fault_injection)")
        properties = dict(message.properties)
        try:
            reconsume = int(properties.pop(props.RECONSUME_TIMES, "0"))
            limit = int(properties.pop(props.MAX_RECONSUME_TIMES, "-1"))
        except ValueError:
            raise MessageIllegalError("reconsume counts must be numbers") from None
        group = self._group(message.topic[len(RETRY_PREFIX) :])
        if limit < 0:
            limit = group.retry.max_retries
        over = limit >= 0 and reconsume > limit
        if over or properties.get(props.DELAY_LEVEL) == "-1":
            properties.pop(props.DELAY_LEVEL, None)
            properties[props.DLQ_REASON] = f"consumed {reconsume} times without success"
            dlq = self.topics.ensure_system(dlq_topic(group.name), 1, PERM_WRITE)
            return msgspec.structs.replace(
                message,
                topic=dlq.name,
                queue_id=0,
                properties=properties,
                reconsume_times=reconsume,
            )
        return msgspec.structs.replace(message, properties=properties, reconsume_times=reconsume)

    def _delay(self, message: StoreMessage, now_ms: int) -> StoreMessage:
        """Route a delayed message (delay level, or delivery time) to the schedule topics."""
        properties = message.properties
        level_text = properties.get(props.DELAY_LEVEL)
        due_text = properties.get(props.DELIVER_TIME_MS)
        if level_text is None and due_text is None:
            return message
        if level_text is not None:
            try:
                level = int(level_text)
            except ValueError:
                raise MessageIllegalError(f"delay level {level_text!r} is not a number") from None
            if level <= 0:
                return message
            if level > len(self.config.delay_levels):
                raise MessageIllegalError(
                    f"delay level {level} does not exist (1..{len(self.config.delay_levels)})"
                )
            return self.schedule.schedule_level(message, level, now_ms)
        assert due_text is not None
        try:
            due = int(due_text)
        except ValueError:
            raise MessageIllegalError(f"delivery time {due_text!r} is not epoch ms") from None
        if due - now_ms > self.config.max_delay * 1000:
            raise MessageIllegalError(
                f"delivery time is more than {self.config.max_delay / 86400:g} days ahead"
            )
        if due <= now_ms:
            return message
        return self.schedule.schedule_at(message, due)

    def _backlog(self, topic: str, queue_id: int) -> int:
        """Newest offset minus the slowest committed offset of the groups reading this queue
        (0 when no group has committed yet). The slowest offset is looked up at most every
        100 ms per queue; the newest offset is always current."""
        key = (topic, queue_id)
        now = self._clock()
        cached = self._slowest.get(key)
        if cached is None or now - cached[0] >= 0.1:
            cached = (now, self.offsets.slowest(topic, queue_id))
            self._slowest[key] = cached
        committed = cached[1]
        return 0 if committed < 0 else self.store.max_offset(topic, queue_id) - committed

    def _fault(self, name: str) -> bool:
        """Testing only: consume one injected failure of kind ``name``."""
        left = self._faults.get(name, 0)
        if left <= 0:
            return False
        self._faults[name] = left - 1
        return True

    def _select_queue(self, topic: TopicConfig, requested: int, group: str | None) -> int:
        if requested >= 0:
            if requested >= topic.queues:
                raise MessageIllegalError(
                    f"queue {requested} does not exist: topic {topic.name!r} has "
                    f"{topic.queues} queues"
                )
            return requested
        if group:
            return queue_for_group(group, topic.queues)
        turn = self._round_robin.get(topic.name, 0)
        self._round_robin[topic.name] = turn + 1
        return turn % topic.queues

    async def _await_durable(self, results: list[PutResult]) -> None:
        if not self._sync_flush:
            return
        end = max((r.physical_offset + r.size for r in results if r.status.stored), default=0)
        if not end:
            return
        self.flow.pending_flushes += 1
        try:
            durable = await self._durability.wait(end)
        finally:
            self.flow.pending_flushes -= 1
        if not durable:
            results[:] = self.store.not_durable(results)

    def _outcome(self, stored: StoreMessage, result: PutResult) -> SendOutcome:
        code = _PUT_CODES[result.status]
        if stored.topic in _HELD_TOPICS:  # delayed or half: the real offset comes later
            message_id = stored.properties.get(props.MESSAGE_ID, "")
            recallable = stored.topic in _SCHEDULE_TOPICS and result.status.stored
            return SendOutcome(
                code=code,
                remark=result.reason,
                message_id=message_id,
                queue_id=int(stored.properties.get(props.REAL_QUEUE_ID, "-1")),
                queue_offset=-1,
                physical_offset=result.physical_offset,
                transaction_id=stored.properties.get(props.TRANSACTION_ID, ""),
                topic=stored.properties.get(props.REAL_TOPIC, stored.topic),
                recall_handle=(
                    make_recall_handle(result.physical_offset, message_id) if recallable else ""
                ),
            )
        return SendOutcome(
            code=code,
            remark=result.reason,
            message_id=stored.properties.get(props.MESSAGE_ID, ""),
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            physical_offset=result.physical_offset,
            topic=stored.topic,
        )

    async def append_internal(self, messages: list[StoreMessage]) -> list[PutResult]:
        """Store messages the broker itself produces (retries, dead letters, timers)."""
        results = self._append_now(messages)
        await self._await_durable(results)
        return results

    def _append_now(self, messages: list[StoreMessage]) -> list[PutResult]:
        """Append without waiting for a sync flush, and wake readers of the touched topics."""
        results = self.store.append(messages)
        self._wake(
            {
                (m.topic, m.queue_id)
                for m, r in zip(messages, results, strict=True)
                if r.status.stored
            }
        )
        return results

    def _wake(self, touched: set[tuple[str, int]]) -> None:
        """New messages on these queues: wake the pulls waiting on each queue, the pops waiting
        on each topic, and the scheduler when something was scheduled."""
        topics = set()
        for key in touched:
            self.arrivals.notify(key)
            topics.add(key[0])
        for topic in topics:
            self.arrivals.notify(topic)
        if topics & _SCHEDULE_TOPICS:
            self.schedule.notify()

    # -- consumer retry (send-back) -------------------------------------------------------

    async def send_back(
        self,
        group: str,
        physical_offset: int,
        message_id: str,
        *,
        delay_level: int = 0,
        max_reconsume_times: int = -1,
        outcome: str = Outcome.RECONSUME_LATER.value,
        error: str = "",
        consumer: str = "",
        delivered_at: float | None = None,
    ) -> str:
        """Re-store a message a consumer failed on: into ``%RETRY%<group>`` after a delay, or
        into ``%DLQ%<group>`` when its retries are used up (or ``delay_level`` < 0).

        Returns ``"retry"`` or ``"dlq"``. The message keeps its id; ``RETRY_TOPIC`` keeps its
        original topic and ``ORIGIN_MESSAGE_ID`` its first id (seed 000/001).
        """
        group_config = self._group(group)
        if self._fault("send_back"):
            raise BrokerError("injected send-back failure (fault_injection)")
        record = self.store.read_message(physical_offset)
        if record is None or record.message_id != message_id:
            raise MessageNotFoundError(
                f"no message {message_id!r} at offset {physical_offset} (removed by retention?)"
            )
        self.history.record(
            message_id=message_id,
            group=group,
            topic=record.properties.get(props.RETRY_TOPIC, record.topic),
            attempt=record.reconsume_times + 1,
            outcome=outcome,
            consumer=consumer,
            error=error,
            delivered_at=delivered_at,
            message_group=record.properties.get(props.MESSAGE_GROUP, ""),
        )
        properties = dict(record.properties)
        properties.setdefault(props.RETRY_TOPIC, record.topic)
        properties.setdefault(props.ORIGIN_MESSAGE_ID, message_id)
        limit = max_reconsume_times if max_reconsume_times >= 0 else group_config.retry.max_retries
        reconsume = record.reconsume_times
        if delay_level < 0 or (limit >= 0 and reconsume >= limit):
            reason = (
                "sent to DLQ by the consumer"
                if delay_level < 0
                else (f"consumed {reconsume + 1} times without success")
            )
            result = self.dead_letter(
                group, msgspec.structs.replace(record, properties=properties), reason=reason
            )
            _require_dead_letter_stored(result)  # the consumer must not count it as handled
            return "dlq"
        retry = self.topics.ensure_system(
            retry_topic(group), max(1, group_config.retry_queues), PERM_READ | PERM_WRITE
        )
        message = StoreMessage(
            topic=retry.name,
            queue_id=self._round_robin_next(retry.name) % retry.queues,
            body=record.body,
            properties=properties,
            flags=record.flags,
            born_timestamp=record.born_timestamp,
            reconsume_times=reconsume + 1,
        )
        now_ms = int(self._clock() * 1000)
        if delay_level > 0:
            held = self.schedule.schedule_level(message, delay_level, now_ms)
        else:
            seconds = group_config.retry.delay(reconsume + 1, self.config.delay_levels)
            level = self.schedule.level_for(seconds)
            if level is not None:
                held = self.schedule.schedule_level(message, level, now_ms)
            else:
                held = self.schedule.schedule_at(message, now_ms + int(seconds * 1000))
        [result] = await self.append_internal([held])
        if not result.status.stored:
            raise BrokerError(f"storing the retry failed: {result.reason or result.status.value}")
        self.counters["sent_back"] += 1
        return "retry"

    def _round_robin_next(self, key: str) -> int:
        turn = self._round_robin.get(key, 0)
        self._round_robin[key] = turn + 1
        return turn

    # -- pull (push consumers) ------------------------------------------------------------

    def pull_now(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        expression: str = "*",
    ) -> PullOutcome | None:
        """A pull answered without waiting, or None when it would wait for new messages."""
        self._group(group)
        config = self._readable_topic(topic, group)
        if not 0 <= queue_id < config.queues:
            raise InvalidArgumentError(f"topic {topic!r} has no queue {queue_id}")
        tags = parse_tag_expression(expression)
        got = self.store.get_messages(
            topic, queue_id, offset, max_count=max(1, min(max_count, 1024)), tags=tags
        )
        if got.status is GetStatus.FOUND:
            delivered = [self._deliver(m) for m in got.messages]
            self.counters["messages_out"] += len(delivered)
            return PullOutcome(
                PullStatus.FOUND, got.next_offset, got.min_offset, got.max_offset, delivered
            )
        return None

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        expression: str = "*",
        max_wait: float = 0.0,
    ) -> PullOutcome:
        self._group(group)
        config = self._readable_topic(topic, group)
        if not 0 <= queue_id < config.queues:
            raise InvalidArgumentError(f"topic {topic!r} has no queue {queue_id}")
        tags = parse_tag_expression(expression)
        max_count = max(1, min(max_count, 1024))
        deadline = self._clock() + min(max_wait, self.config.max_long_poll)
        while True:
            got = self.store.get_messages(topic, queue_id, offset, max_count=max_count, tags=tags)
            status = got.status
            if status is GetStatus.FOUND:
                delivered = [self._deliver(m) for m in got.messages]
                self.counters["messages_out"] += len(delivered)
                return PullOutcome(
                    PullStatus.FOUND, got.next_offset, got.min_offset, got.max_offset, delivered
                )
            waiting = status is GetStatus.OFFSET_OVERFLOW_ONE or (
                status is GetStatus.NO_MESSAGE_IN_QUEUE and offset == 0
            )
            if waiting:
                remaining = deadline - self._clock()
                if remaining > 0 and await self.arrivals.wait((topic, queue_id), remaining):
                    continue
                return PullOutcome(
                    PullStatus.NO_NEW_MESSAGE, offset, got.min_offset, got.max_offset
                )
            if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                return PullOutcome(
                    PullStatus.NO_MATCHED_MESSAGE, got.next_offset, got.min_offset, got.max_offset
                )
            return PullOutcome(
                PullStatus.OFFSET_ILLEGAL, got.next_offset, got.min_offset, got.max_offset
            )

    def _deliver(
        self, message: StoredMessage, *, attempt: int | None = None, handle: str = ""
    ) -> Delivered:
        return Delivered(
            topic=message.topic,
            queue_id=message.queue_id,
            queue_offset=message.queue_offset,
            body=message.body,
            properties=message.properties,
            born_timestamp=message.born_timestamp,
            store_timestamp=message.store_timestamp,
            physical_offset=message.physical_offset,
            delivery_attempt=attempt if attempt is not None else message.reconsume_times + 1,
            receipt_handle=handle,
            born_host=message.born_host,
        )

    # -- offsets --------------------------------------------------------------------------

    def commit_offsets(self, group: str, entries: Sequence[tuple[str, int, int]]) -> None:
        self._group(group)
        self.offsets.check(entries)  # names end up in offsets.json keys: refuse before storing
        for topic, queue_id, offset in entries:
            # nobody consumed past the queue's end: a larger offset is a client's mistake
            newest = self.store.max_offset(topic, queue_id)
            self.offsets.commit(group, topic, queue_id, min(offset, newest))

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or where a group without one starts (its consume-from)."""
        group_config = self._group(group)
        committed = self.offsets.query(group, topic, queue_id)
        if committed >= 0:
            return committed
        return self._initial_offset(group_config, topic, queue_id)

    def _initial_offset(self, group: GroupConfig, topic: str, queue_id: int) -> int:
        if (
            group.consume_from is ConsumeFrom.LAST
            and not topic.startswith(RETRY_PREFIX)
            and group.name not in self._offsets_lost  # its offset may be lost: redeliver
        ):
            return self.store.max_offset(topic, queue_id)
        return self.store.min_offset(topic, queue_id)

    # -- pop (simple consumers) -----------------------------------------------------------

    def pop_now(
        self,
        group: str,
        topic: str,
        *,
        max_count: int = 32,
        invisible: float = 30.0,
        expression: str = "*",
        consumer: str = "",
        queue_hint: int = -1,
        max_bytes: int | None = None,
    ) -> list[Delivered]:
        """A pop answered without waiting (possibly empty). ``max_bytes``: stop taking messages
        once those taken hold this many bytes (see :class:`PopBatch`)."""
        group_config = self._group(group)
        topic_config = self._readable_topic(topic, group)
        if invisible <= 0:
            raise InvalidArgumentError("invisible duration must be positive")
        delivered = self._pop_once(
            group_config,
            topic_config,
            max(1, min(max_count, 1024)),
            invisible,
            parse_tag_expression(expression),
            consumer,
            queue_hint,
            max_bytes,
        )
        self.counters["messages_out"] += len(delivered)
        return delivered

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int = 32,
        invisible: float = 30.0,
        max_wait: float = 0.0,
        expression: str = "*",
        consumer: str = "",
        queue_hint: int = -1,
        max_bytes: int | None = None,
    ) -> list[Delivered]:
        """A pop that long-polls up to ``max_wait`` for something to deliver."""
        deadline = self._clock() + min(max_wait, self.config.max_long_poll)
        while True:
            delivered = self.pop_now(
                group,
                topic,
                max_count=max_count,
                invisible=invisible,
                expression=expression,
                consumer=consumer,
                queue_hint=queue_hint,
                max_bytes=max_bytes,
            )
            remaining = deadline - self._clock()
            if delivered or remaining <= 0:
                return delivered
            next_expiry = self._next_expiry(group, self.topics.require(topic))
            if next_expiry is not None:
                remaining = min(remaining, max(0.001, next_expiry - self._clock()))
            await self.arrivals.wait(topic, remaining)

    def _pop_once(
        self,
        group: GroupConfig,
        topic: TopicConfig,
        max_count: int,
        invisible: float,
        tags: frozenset[str] | None,
        consumer: str,
        queue_hint: int,
        max_bytes: int | None = None,
    ) -> list[Delivered]:
        now = self._clock()
        out = PopBatch(max_bytes)
        key = f"{group.name}@{topic.name}"
        start = queue_hint if 0 <= queue_hint < topic.queues else self._round_robin.get(key, 0)
        self._round_robin[key] = start + 1
        for step in range(topic.queues):
            if len(out) >= max_count or out.full_of_bytes:
                break
            queue_id = (start + step) % topic.queues
            state = self.pop_state.get(group.name, topic.name, queue_id)
            if state is None:
                committed = self.offsets.query(group.name, topic.name, queue_id)
                first = (
                    committed
                    if committed >= 0
                    else self._initial_offset(group, topic.name, queue_id)
                )
                state = self.pop_state.ensure(group.name, topic.name, queue_id, first)
            if group.fifo:
                self._pop_fifo(
                    group,
                    topic.name,
                    queue_id,
                    state,
                    now,
                    invisible,
                    consumer,
                    tags,
                    out,
                    max_count,
                )
            else:
                self._redeliver(
                    group, topic.name, queue_id, state, now, invisible, consumer, out, max_count
                )
                if (
                    len(out) < max_count
                    and not out.full_of_bytes
                    and len(state.inflight) < self.config.max_inflight_per_queue
                ):
                    self._deliver_new(
                        topic.name, queue_id, state, now, invisible, consumer, tags, out, max_count
                    )
            self.offsets.commit(group.name, topic.name, queue_id, state.committed)
        if out:
            self.pop_state.dirty = True
        return out

    def _redeliver(
        self,
        group: GroupConfig,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        out: PopBatch,
        max_count: int,
    ) -> None:
        for offset, entry in state.expired(now):
            if len(out) >= max_count or out.full_of_bytes:
                state.requeue(offset, entry)
                continue
            message = self._message_at(topic, queue_id, offset)
            if message is None:  # removed by retention
                state.finish(offset)
                continue
            self._record_expiry(group.name, message, entry, now)
            if group.retry.max_retries >= 0 and entry.attempt >= group.retry.max_attempts:
                self._dead_letter_offset(group.name, topic, queue_id, offset, state, message, entry)
                continue
            attempt = entry.attempt + 1
            token = state.hand_out(
                offset, attempt, now + invisible, consumer, now, "", message.message_id
            )
            out.append(
                self._deliver(
                    message, attempt=attempt, handle=Handle(queue_id, offset, token).encode()
                )
            )

    def _deliver_new(
        self,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        tags: frozenset[str] | None,
        out: PopBatch,
        max_count: int,
    ) -> None:
        got = self.store.get_messages(
            topic, queue_id, state.next_offset, max_count=max_count - len(out), tags=tags
        )
        if got.status is GetStatus.OFFSET_TOO_SMALL:
            state.skip_to(got.next_offset)
            got = self.store.get_messages(
                topic, queue_id, state.next_offset, max_count=max_count - len(out), tags=tags
            )
        for message in got.messages:
            if out.full_of_bytes:  # the rest stays for the next pop
                state.skip_to(message.queue_offset)
                return
            offset = message.queue_offset
            attempt = message.reconsume_times + 1
            token = state.hand_out(
                offset, attempt, now + invisible, consumer, now, "", message.message_id
            )
            state.next_offset = offset + 1
            out.append(
                self._deliver(
                    message, attempt=attempt, handle=Handle(queue_id, offset, token).encode()
                )
            )
        if got.status in (
            GetStatus.FOUND,
            GetStatus.NO_MATCHED_MESSAGE,
            GetStatus.MESSAGE_WAS_REMOVING,
        ):
            state.skip_to(got.next_offset)

    def _pop_fifo(
        self,
        group: GroupConfig,
        topic: str,
        queue_id: int,
        state: PopQueue,
        now: float,
        invisible: float,
        consumer: str,
        tags: frozenset[str] | None,
        out: PopBatch,
        max_count: int,
    ) -> None:
        """FIFO pop: per message group, never hand out a message while an earlier one of its
        group is in flight and still invisible (seed 002, but per group instead of per queue, so
        one failing group does not stall the others hashed to the same queue)."""
        busy = state.busy_groups(now)
        limit = group.retry.max_attempts if group.retry.max_retries >= 0 else None
        # 1. what is already pending (expired deliveries and parked messages), in offset order
        for offset in sorted(set(state.inflight) | set(state.parked)):
            if len(out) >= max_count or out.full_of_bytes:
                return
            entry = state.inflight.get(offset)
            key = entry.message_group if entry is not None else state.parked[offset]
            if key in busy:
                continue
            message = self._message_at(topic, queue_id, offset)
            if message is None:
                state.finish(offset)
                continue
            if entry is not None:  # its invisible time passed: deliver again, attempt + 1
                self._record_expiry(group.name, message, entry, now)
                if limit is not None and entry.attempt >= limit:
                    self._dead_letter_offset(
                        group.name, topic, queue_id, offset, state, message, entry
                    )
                    continue
                attempt = entry.attempt + 1
            else:
                del state.parked[offset]
                attempt = message.reconsume_times + 1
            token = state.hand_out(
                offset, attempt, now + invisible, consumer, now, key, message.message_id
            )
            out.append(
                self._deliver(
                    message, attempt=attempt, handle=Handle(queue_id, offset, token).encode()
                )
            )
        # 2. new messages: hand out those of idle groups, park those of busy ones
        while (
            len(out) < max_count
            and not out.full_of_bytes
            and len(state.parked) < self.config.max_inflight_per_queue
        ):
            got = self.store.get_messages(
                topic, queue_id, state.next_offset, max_count=max_count, tags=tags
            )
            if got.status is GetStatus.OFFSET_TOO_SMALL:
                state.skip_to(got.next_offset)
                continue
            if not got.messages:
                if got.status in _SKIPPABLE:
                    state.skip_to(got.next_offset)
                return
            for message in got.messages:
                offset = message.queue_offset
                key = message.properties.get(props.MESSAGE_GROUP) or f"\0{offset}"
                if key in busy or len(out) >= max_count or out.full_of_bytes:
                    state.parked[offset] = key
                    busy.add(key)  # keep the group's later messages behind this one
                else:
                    attempt = message.reconsume_times + 1
                    token = state.hand_out(
                        offset, attempt, now + invisible, consumer, now, key, message.message_id
                    )
                    out.append(
                        self._deliver(
                            message,
                            attempt=attempt,
                            handle=Handle(queue_id, offset, token).encode(),
                        )
                    )
                state.next_offset = offset + 1
            state.skip_to(got.next_offset)

    def _message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        got = self.store.get_messages(topic, queue_id, offset, max_count=1)
        if got.messages and got.messages[0].queue_offset == offset:
            return got.messages[0]
        return None

    def _next_expiry(self, group: str, topic: TopicConfig) -> float | None:
        times = []
        for queue_id in range(topic.queues):
            state = self.pop_state.get(group, topic.name, queue_id)
            if state is not None:
                visible_at = state.next_visible_at()
                if visible_at is not None:
                    times.append(visible_at)
        return min(times) if times else None

    def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        handle = Handle.parse(receipt_handle)
        state, entry = self.pop_state.lookup(group, topic, handle)
        self._record_entry(group, topic, entry, Outcome.SUCCESS)
        state.finish(handle.offset)
        self.offsets.commit(group, topic, handle.queue_id, state.committed)
        self.pop_state.dirty = True
        self.counters["acks"] += 1
        if state.parked:
            self.arrivals.notify(topic)  # FIFO: the group's next message may be handed out

    def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible: float, *, error: str = ""
    ) -> str:
        """Hide the message again for ``invisible`` seconds; returns the new receipt handle.

        This is how a pop consumer says "failed, retry later": the current attempt is recorded
        as ``RECONSUME_LATER`` and the next delivery counts as a new attempt.
        """
        if invisible < 0:
            raise InvalidArgumentError("invisible duration must not be negative")
        handle = Handle.parse(receipt_handle)
        state, entry = self.pop_state.lookup(group, topic, handle)
        self._record_entry(group, topic, entry, Outcome.RECONSUME_LATER, error)
        was_visible_at = entry.visible_at
        visible_at = self._clock() + invisible
        token = state.rehide(handle.offset, visible_at)
        group_config = self.groups.get(group)
        if group_config is not None and group_config.fifo and entry.message_group:
            state.rehide_group(entry.message_group, visible_at)  # the run comes back together
            token = state.inflight[handle.offset].token
        self.pop_state.dirty = True
        if entry.visible_at < was_visible_at:
            # sooner than before: long polls sleeping until the old time must look again
            self.arrivals.notify(topic)
        return Handle(handle.queue_id, handle.offset, token).encode()

    def _revive(self, now: float) -> None:
        """Move messages that used up their attempts to the DLQ without waiting for a pop."""
        for (group_name, topic, queue_id), state in self.pop_state.items():
            group = self.groups.get(group_name)
            if group is None or group.retry.max_retries < 0:
                continue
            for offset, entry in state.expired(now):
                if entry.attempt >= group.retry.max_attempts:
                    message = self._message_at(topic, queue_id, offset)
                    if message is not None:
                        self._record_expiry(group_name, message, entry, now)
                    self._dead_letter_offset(
                        group_name, topic, queue_id, offset, state, message, entry
                    )
                else:
                    state.requeue(offset, entry)

    def _record_expiry(
        self, group: str, message: StoredMessage, entry: InFlight, now: float
    ) -> None:
        self._record_entry(
            group,
            message.topic,
            entry,
            Outcome.INVISIBLE_EXPIRED,
            "not acknowledged within the invisible time",
            now,
        )

    def _record_entry(
        self,
        group: str,
        topic: str,
        entry: InFlight,
        outcome: Outcome,
        error: str = "",
        finished_at: float | None = None,
    ) -> None:
        """One pop delivery attempt ended: record it in the attempt history."""
        self.history.record(
            message_id=entry.message_id,
            group=group,
            topic=topic,
            attempt=entry.attempt,
            outcome=outcome,
            consumer=entry.consumer,
            error=error,
            delivered_at=entry.delivered_at,
            finished_at=finished_at,
            message_group=entry.message_group,
        )

    def _dead_letter_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        state: PopQueue,
        message: StoredMessage | None = None,
        entry: InFlight | None = None,
    ) -> None:
        message = message or self._message_at(topic, queue_id, offset)
        if message is not None:
            result = self.dead_letter(group, message, reason="max delivery attempts reached")
            if not result.status.stored:
                # Not finished, not committed: it expires again and the move is retried.
                if entry is not None:
                    state.requeue(offset, entry)
                return
        state.finish(offset)
        self.offsets.commit(group, topic, queue_id, state.committed)
        self.pop_state.dirty = True

    def dead_letter(self, group: str, message: StoredMessage, *, reason: str) -> PutResult:
        """Store a copy of ``message`` in ``%DLQ%<group>`` (write-only for consumers)."""
        dlq = self.topics.ensure_system(dlq_topic(group), 1, PERM_WRITE)
        properties = dict(message.properties)
        original = properties.get(props.RETRY_TOPIC) or message.topic
        if original.startswith(RETRY_PREFIX):
            original = properties.get(props.RETRY_TOPIC, original)
        properties[props.RETRY_TOPIC] = original
        properties.setdefault(props.ORIGIN_MESSAGE_ID, properties.get(props.MESSAGE_ID, ""))
        properties[props.DLQ_REASON] = reason
        [result] = self.store.append(
            [
                StoreMessage(
                    topic=dlq.name,
                    queue_id=0,
                    body=message.body,
                    properties=properties,
                    flags=message.flags,
                    born_timestamp=message.born_timestamp,
                    reconsume_times=message.reconsume_times,
                )
            ]
        )
        if not result.status.stored:
            log.error(
                "message %s of group %s could not be dead-lettered (%s); it stays pending",
                message.message_id,
                group,
                result.reason or result.status.value,
            )
            return result
        self.counters["dead_lettered"] += 1
        self.history.record(
            message_id=message.message_id,
            group=group,
            topic=original,
            attempt=message.reconsume_times + 1,
            outcome=Outcome.DLQ,
            error=reason,
            message_group=properties.get(props.MESSAGE_GROUP, ""),
        )
        log.info("message %s of group %s dead-lettered: %s", message.message_id, group, reason)
        return result

    # -- membership -----------------------------------------------------------------------

    def heartbeat(
        self,
        client_id: str,
        consumers: Sequence[tuple[str, str, dict[str, str]]],
        notify: Notify | None = None,
    ) -> None:
        now = self._clock()
        for group, model, subscriptions in consumers:
            self._group(group)
            self.consumers.heartbeat(client_id, group, model, subscriptions, now, notify)

    def unregister(self, client_id: str, groups: list[str] | None = None) -> None:
        self.consumers.unregister(client_id, groups or None)
        self.locks.release_client(client_id)

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        """Orderly consumers: take or renew queue locks; returns the queues held."""
        self._group(group)
        return self.locks.lock(group, client_id, queues)

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[tuple[str, int]]) -> None:
        self.locks.unlock(group, client_id, queues)

    def consumer_ids(self, group: str) -> list[str]:
        self._group(group)
        return self.consumers.client_ids(group)

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
    ) -> EndOutcome:
        """Commit or roll back a half message. The first outcome is final: the same outcome
        again is answered as a duplicate, a different one raises TransactionStateError."""
        if self._closed:
            raise ServiceUnavailableError("the broker is shutting down")
        return await self.transactions.end(
            producer_group,
            message_id,
            transaction_id,
            commit=commit,
            from_check=from_check,
            topic=topic,
        )

    def transaction_state(self, message_id: str) -> TransactionStatus | None:
        return self.transactions.state(message_id)

    def heartbeat_producer(
        self, client_id: str, groups: Sequence[str], check: CheckChannel, owner: object = None
    ) -> None:
        """A producer of ``groups`` is live; ``check`` delivers transaction checks to it."""
        self.transactions.heartbeat(client_id, groups, check, owner)

    def unregister_producer(
        self, client_id: str, groups: Sequence[str] | None = None, *, owner: object = None
    ) -> None:
        self.transactions.producers.unregister(client_id, groups, owner=owner)

    # -- attempt history, dead-letter tools -----------------------------------------------

    def report_outcomes(self, group: str, consumer: str, attempts: Sequence[Attempt]) -> None:
        """Push consumers report their successful attempts (failures come with send-back)."""
        for attempt in attempts:
            self.history.record(
                message_id=attempt.message_id,
                group=group,
                topic=attempt.topic,
                attempt=attempt.attempt,
                outcome=attempt.outcome,
                consumer=consumer or attempt.consumer,
                error=attempt.error,
                delivered_at=attempt.delivered_at / 1000,
                finished_at=attempt.finished_at / 1000,
                message_group=attempt.message_group,
            )

    def message_history(self, message_id: str) -> list[Attempt]:
        return self.history.query(message_id)

    def browse(
        self, topic: str, queue_id: int, offset: int, max_count: int = 32
    ) -> list[Delivered]:
        """Read any topic (dead-letter topics and the internal ledgers included) without
        consuming: operator tools and exports."""
        if topic == HISTORY_TOPIC:
            self.history.flush()
        elif topic not in _BROWSABLE_INTERNAL:
            self.topics.require(topic)
        got = self.store.get_messages(
            topic,
            queue_id,
            max(offset, self.store.min_offset(topic, queue_id)),
            max_count=max(1, min(max_count, 1024)),
        )
        return [self._deliver(m) for m in got.messages]

    async def redrive(
        self, group: str, dlq_offsets: Sequence[int], *, target: str = "origin", operator: str = ""
    ) -> list[tuple[int, str, str, SendOutcome | None]]:
        """Re-send dead letters of ``group`` (by their offset in ``%DLQ%<group>``), each once
        (broker/redrive.py: one redrive per group at a time, progress recorded per message).

        ``target``: ``origin`` re-sends to the original topic (every subscribed group sees it),
        ``retry`` to ``%RETRY%<group>`` (only this group). Returns
        ``(offset, message id, "resent" | "already" | "missing" | "failed: ...", outcome)``.
        """
        self._group(group)
        if target not in ("origin", "retry"):
            raise InvalidArgumentError("redrive target must be 'origin' or 'retry'")
        return await self.redrives.redrive(group, dlq_offsets, target, operator)

    def redriven(self, group: str) -> set[int]:
        return self.redrives.ledger.offsets(group)

    # -- queries and status ---------------------------------------------------------------

    def query_messages(
        self, *, message_id: str = "", topic: str = "", key: str = "", max_count: int = 32
    ) -> list[Delivered]:
        if message_id:
            found = self.store.query_by_id(message_id, max_count)
        elif topic and key:
            found = self.store.query_by_key(topic, key, max_count)
        else:
            raise InvalidArgumentError("query by message id, or by topic and key")
        return [self._deliver(m) for m in found]

    def queue_status(self, topic: str, group: str = "") -> list[tuple[int, int, int, int]]:
        """``(queue id, min offset, max offset, committed or -1)`` for each queue."""
        queues = _BROWSABLE_INTERNAL.get(topic) or self.topics.require(topic).queues
        if topic == HISTORY_TOPIC:
            self.history.flush()
        rows = []
        for queue_id in range(queues):
            committed = self.offsets.query(group, topic, queue_id) if group else -1
            rows.append(
                (
                    queue_id,
                    self.store.min_offset(topic, queue_id),
                    self.store.max_offset(topic, queue_id),
                    committed,
                )
            )
        return rows

    def status(self) -> dict[str, object]:
        stats = self.store.statistics()
        return {
            "counters": {**self.counters, "transactions_pending": self.transactions.pending_count},
            "store": {
                "messages_put": stats.messages_put,
                "bytes_put": stats.bytes_put,
                "write_position": stats.write_position,
                "flushed_position": stats.flushed_position,
                "segments": stats.segments,
                "queues": stats.queues,
                "fsyncs": stats.fsyncs,
                "flush_mode": stats.flush_mode,
                "failure": stats.failure,
                "damaged_records_read": stats.damaged_records_read,
                "quarantined_ranges": stats.quarantined_ranges,
                "recovered_truncated_bytes": stats.recovered_truncated_bytes,
                "open_queue_files": stats.open_queue_files,
            },
        }

    # -- used by the gRPC adapter ---------------------------------------------------------

    def require_group(self, name: str) -> GroupConfig:
        """A consumer group's configuration (created on first use when auto-create is on)."""
        return self._group(name)

    def forward_to_dead_letter(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        *,
        reason: str = "forwarded to the DLQ by the consumer",
    ) -> None:
        """Move a popped message to ``%DLQ%<group>`` now (a FIFO consumer gave up on it
        after its local retries); its receipt handle must still be valid."""
        self._group(group)
        handle = Handle.parse(receipt_handle)
        state, _ = self.pop_state.lookup(group, topic, handle)
        message = self._message_at(topic, handle.queue_id, handle.offset)
        if message is not None:  # None: removed by retention, nothing left to keep
            _require_dead_letter_stored(self.dead_letter(group, message, reason=reason))
        state.finish(handle.offset)
        self.offsets.commit(group, topic, handle.queue_id, state.committed)
        self.pop_state.dirty = True

    def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due (the ``recall_handle`` of its send
        outcome); returns its message id."""
        parsed = parse_recall_handle(recall_handle)
        if parsed is None:
            raise InvalidArgumentError(f"malformed recall handle {recall_handle!r}")
        physical, message_id = parsed
        record = self.store.read_message(physical)
        if (
            record is None
            or record.message_id != message_id
            or record.topic not in _SCHEDULE_TOPICS
            or record.properties.get(props.REAL_TOPIC) != topic
        ):
            raise MessageNotFoundError(
                f"no delayed message of topic {topic!r} matches recall handle {recall_handle!r}"
            )
        if not self.schedule.cancel(record):
            raise MessageNotFoundError(
                f"message {message_id} was already delivered or recalled; it cannot be recalled"
            )
        self.counters["recalled"] += 1
        return message_id
