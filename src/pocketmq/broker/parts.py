"""What the broker's concept modules share: its state, and the small steps every concept takes.

The broker is one object to its adapters (:class:`pocketmq.broker.Broker`) but several concepts
inside: sending, send-back, pull, pop, dead letters, the catalog of topics and groups,
membership. Each concept is a class of its own module and sees the same state through
:class:`BrokerPart`: the store, the topic and group tables, offsets, pop state, the attempt
history, flow control, and helpers such as "this group, created on first use when allowed" or
"append these internal messages and wake their readers". One :class:`Shared` object holds the
state, so every part sees a change the moment another part makes it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumers import ConsumerRegistry
from pocketmq.broker.durability import DurabilityWaiter
from pocketmq.broker.flow import FlowControl
from pocketmq.broker.groups import GroupManager
from pocketmq.broker.ha.replication import Replication
from pocketmq.broker.history import HISTORY_TOPIC, AttemptHistory
from pocketmq.broker.locks import QueueLocks
from pocketmq.broker.longpoll import ArrivalNotifier
from pocketmq.broker.offsets import OffsetManager
from pocketmq.broker.pop_state import PopManager
from pocketmq.broker.redrive import REDRIVE_AUDIT_TOPIC
from pocketmq.broker.roles import RoleGate
from pocketmq.broker.schedule import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    ScheduleService,
)
from pocketmq.broker.topics import (
    DLQ_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_PREFIX,
    TopicConfig,
    TopicManager,
    TopicType,
    retry_topic,
)
from pocketmq.broker.traffic import Traffic
from pocketmq.broker.transactions import (
    HALF_TOPIC,
    TransactionService,
)
from pocketmq.errors import (
    Code,
    GroupNotFoundError,
    InvalidArgumentError,
    NoPermissionError,
    TopicNotFoundError,
    error_from_code,
)
from pocketmq.model.groups import ConsumeFrom, GroupConfig
from pocketmq.model.messages import Delivered
from pocketmq.store import (
    FlushMode,
    MessageStore,
    PutResult,
    PutStatus,
    StoredMessage,
    StoreMessage,
    faults,
)

__all__ = [
    "BROWSABLE_INTERNAL",
    "HELD_TOPICS",
    "PUT_CODES",
    "SCHEDULE_TOPICS",
    "Appender",
    "BrokerPart",
    "Shared",
    "require_dead_letter_stored",
]

log = logging.getLogger("pocketmq.broker")


PUT_CODES = {
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
"""The wire code for each store outcome."""

SCHEDULE_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
HELD_TOPICS = SCHEDULE_TOPICS | {HALF_TOPIC}  # stored aside; the real topic is a property
# Internal ledgers that have no topic config but may be browsed (exports): name -> queue count.
BROWSABLE_INTERNAL = {HISTORY_TOPIC: 1, REDRIVE_AUDIT_TOPIC: 1}


def require_dead_letter_stored(result: PutResult) -> None:
    """Raise the client-facing error when the store refused a dead letter."""
    if not result.status.stored:
        raise error_from_code(
            PUT_CODES[result.status],
            f"storing the dead letter failed: {result.reason or result.status.value}",
        )


@dataclass(kw_only=True, eq=False)
class Shared:
    """The state of one broker, shared by all of its parts."""

    config: BrokerConfig
    clock: Callable[[], float]
    store: MessageStore
    topics: TopicManager
    groups: GroupManager
    offsets: OffsetManager
    pop_state: PopManager
    consumers: ConsumerRegistry
    arrivals: ArrivalNotifier
    counters: collections.Counter[str]
    traffic: Traffic
    history: AttemptHistory
    flow: FlowControl
    locks: QueueLocks
    durability: DurabilityWaiter
    offsets_lost: set[str]
    round_robin: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0  # the broker's clock when it was built (uptime in its status)
    # operator resets push consumers have not followed yet: (group, topic, queue) -> offset
    resets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    closed: bool = False
    # services built on top of the parts (set once the broker has built them)
    schedule: ScheduleService | None = None
    transactions: TransactionService | None = None
    replication: Replication | None = None
    roles: RoleGate | None = None


class Appender:
    """How the broker stores what it writes itself (retries, dead letters, timers, transaction
    ops, redrive audits) and who learns of an append: the sync flush it waits for, the scheduler,
    replication, and the pulls and pops waiting on the queues. Handed to the services that
    append (schedule, transactions, redrives, replication) instead of a part's private steps."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        self.store = shared.store
        self.flow = shared.flow
        self.traffic = shared.traffic
        self.arrivals = shared.arrivals
        self._durability = shared.durability
        self._sync_flush = shared.config.store.flush_mode is FlushMode.SYNC

    async def flushed(self, end: int) -> bool:
        """Wait for the sync flush to pass log offset ``end`` (counted for flow control, which
        refuses sends while too many wait); False when it did not in time or failed."""
        self.flow.pending_flushes += 1
        try:
            return await self._durability.wait(end)
        finally:
            self.flow.pending_flushes -= 1

    async def await_durable(self, results: list[PutResult]) -> None:
        """Internal appends wait for a sync flush (not for a slave: docs/replication.md §3)."""
        if not self._sync_flush:
            return
        end = max((r.physical_offset + r.size for r in results if r.status.stored), default=0)
        if end and not await self.flushed(end):
            results[:] = self.store.not_durable(results)

    async def append_internal(self, messages: list[StoreMessage]) -> list[PutResult]:
        """Store messages the broker itself produces (retries, dead letters, timers)."""
        results = self.append_now(messages)
        await self.await_durable(results)
        return results

    def append_now(self, messages: list[StoreMessage]) -> list[PutResult]:
        """Append without waiting for a sync flush, and wake readers of the touched topics."""
        results = self.store.append(messages)
        end = max((r.physical_offset + r.size for r in results if r.status.stored), default=0)
        touched: set[tuple[str, int]] = set()
        for message, result in zip(messages, results, strict=True):
            if result.status.stored:
                touched.add((message.topic, message.queue_id))
                if message.topic.startswith(RETRY_PREFIX):  # a retry coming back: "in" again
                    self.traffic.stored(message.topic, len(message.body))
        self.wake(touched, end)
        return results

    def wake(self, touched: set[tuple[str, int]], end: int = 0) -> None:
        """New messages up to log offset ``end`` on these queues: wake the scheduler when
        something was scheduled, and the pulls and pops waiting on them — once readers may read
        them (a replicated master's confirmed offset, docs/replication.md §3)."""
        for topic, _ in touched:  # a loop, not any(<generator>): once per append
            if topic in SCHEDULE_TOPICS:
                schedule = self._shared.schedule
                if schedule is not None:
                    schedule.notify()
                break
        replication = self._shared.replication
        if replication is not None and end:
            replication.grew(end)
            if replication.defer(end, touched):
                return
        if self.arrivals.waiters:  # wake_readers' own first check, without its frame
            self.wake_readers(touched)

    def wake_readers(self, touched: set[tuple[str, int]]) -> None:
        """Wake the pulls waiting on each queue and the pops waiting on each topic."""
        if not self.arrivals.waiters:  # nobody waits (a producer-only broker): no notify calls
            return
        topics = set()
        for key in touched:
            self.arrivals.notify(key)
            topics.add(key[0])
        for topic in topics:
            self.arrivals.notify(topic)


class BrokerPart:
    """Base of the broker's concept classes: the shared state under short names, and the steps
    they all take. Subclasses hold no state that another part needs."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        self.config = shared.config
        self._clock = shared.clock
        self.store = shared.store
        self.topics = shared.topics
        self.groups = shared.groups
        self.offsets = shared.offsets
        self.pop_state = shared.pop_state
        self.consumers = shared.consumers
        self.arrivals = shared.arrivals
        self.counters = shared.counters
        self.traffic = shared.traffic
        self.history = shared.history
        self.flow = shared.flow
        self.locks = shared.locks
        self._sync_flush = shared.config.store.flush_mode is FlushMode.SYNC
        self._appender = Appender(shared)
        self._round_robin = shared.round_robin
        self._offsets_lost = shared.offsets_lost

    @property
    def schedule(self) -> ScheduleService:
        """The schedule service, which exists only once the broker started as a master."""
        assert self._shared.schedule is not None
        return self._shared.schedule

    @property
    def transactions(self) -> TransactionService:
        """The transaction service, which exists only once the broker started as a master."""
        assert self._shared.transactions is not None
        return self._shared.transactions

    def create_topic(
        self, name: str, *, queues: int | None = None, topic_type: str = "normal", perm: int = 6
    ) -> TopicConfig:
        """Create or update a topic; an unknown topic type is refused with the valid ones named."""
        try:
            kind = TopicType(topic_type)
        except ValueError:
            raise InvalidArgumentError(
                f"topic type {topic_type!r} is not one of normal, fifo, delay, transaction"
            ) from None
        return self.topics.create(
            name, queues=queues or self.config.default_queues, topic_type=kind, perm=perm
        )

    def create_group(self, group: GroupConfig) -> GroupConfig:
        """Create or update a group and its retry topic; a FIFO group without a policy of its own
        retries on the delay levels from level 1."""
        retry = group.retry
        if group.fifo and not retry.delays and retry.initial <= 0:
            # FIFO groups retry on 1s 5s 10s 30s 1m ... 2h, the delay levels from 1
            # (docs/semantics.md, "Ordered messages")
            group = msgspec.structs.replace(
                group, retry=msgspec.structs.replace(retry, delays=self.config.delay_levels)
            )
        created = self.groups.create(group)
        self.topics.ensure_system(
            retry_topic(group.name), max(1, group.retry_queues), PERM_READ | PERM_WRITE
        )
        return created

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
        if not topic.perm & PERM_WRITE:  # TopicConfig.writable, without its property's frame
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

    def _initial_offset(self, group: GroupConfig, topic: str, queue_id: int) -> int:
        if (
            group.consume_from is ConsumeFrom.LAST
            and not topic.startswith(RETRY_PREFIX)
            and group.name not in self._offsets_lost  # its offset may be lost: redeliver
        ):
            return self.store.max_offset(topic, queue_id)
        return self.store.min_offset(topic, queue_id)

    def _fault(self, name: str) -> bool:
        """Testing only: whether the store's fault rules (store/faults.py, op ``name``, target
        ``broker``) fail this operation; one check of ``None`` in production."""
        injector = faults.installed()
        if injector is None:
            return False
        try:
            injector.check(name, "broker")
        except OSError:
            return True
        return False

    @property
    def replication(self) -> Replication:
        """The broker's replication state (docs/replication.md)."""
        assert self._shared.replication is not None
        return self._shared.replication

    @property
    def roles(self) -> RoleGate:
        """The broker's role rules (broker/roles.py)."""
        assert self._shared.roles is not None
        return self._shared.roles

    def _round_robin_next(self, key: str) -> int:
        turn = self._round_robin.get(key, 0)
        self._round_robin[key] = turn + 1
        return turn

    def _message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        got = self.store.get_messages(topic, queue_id, offset, max_count=1)
        if got.messages and got.messages[0].queue_offset == offset:
            return got.messages[0]
        return None

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
            broker_name=self.config.broker_name,  # the native protocol sends it as it is
        )
