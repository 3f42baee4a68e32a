"""Sending: the one path every message takes into the store, whatever the protocol.

A batch is checked against the send contract (pocketmq.contract), each message gets its queue
(round robin, or the consistent hash of its message group), and messages that are not for
consumers yet are routed aside: delayed ones to the schedule topics, half messages to the
transaction topic, a consumer's re-sent retry (or its dead letter). The whole batch then goes to
the store in one append; with sync flush the answer waits for the fsync that covers it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import msgspec

from pocketmq import properties as props
from pocketmq.broker.ha.replication import ReplicaOutcome, ReplicationMode
from pocketmq.broker.parts import HELD_TOPICS, PUT_CODES, SCHEDULE_TOPICS, BrokerPart, Shared
from pocketmq.broker.schedule import (
    make_recall_handle,
    parse_recall_handle,
)
from pocketmq.broker.topics import (
    PERM_WRITE,
    RETRY_PREFIX,
    TopicConfig,
    dlq_topic,
)
from pocketmq.broker.transactions import TransactionService
from pocketmq.contract import Rule, check_message
from pocketmq.errors import (
    BrokerError,
    Code,
    InvalidArgumentError,
    MessageIllegalError,
    MessageNotFoundError,
    MessageTooLargeError,
    PocketMQError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from pocketmq.ids import new_message_id
from pocketmq.model.messages import InboundMessage, SendBatch, SendOutcome
from pocketmq.routing import queue_for_group
from pocketmq.store import (
    PutResult,
    PutStatus,
    StoreMessage,
    pack_host,
)

__all__ = ["SendPath"]

log = logging.getLogger("pocketmq.broker")


# members read once: on Python 3.11 every ``Enum.MEMBER`` read goes through the enum
# type's ``__getattr__`` hook, a cost per message on the send path
_PUT_OK = PutStatus.PUT_OK
_SUCCESS = Code.SUCCESS
_SYNC = ReplicationMode.SYNC
#: At most this many topics' checks are remembered across send calls (``SendPath._check_topic``).
_KNOWN_TOPICS = 10_000


class _Call:
    """What one :meth:`SendPath.send_now_many` looks up once instead of per message: the
    transaction service, the clock, and each user topic it names with the type its messages
    are checked against (None for a system topic). Nothing in one synchronous call changes a
    user topic, so its config is reused within the call only. Built without an ``__init__``
    frame (``_new_call``): one per send call."""

    __slots__ = ("now_ms", "topics", "transactions")

    now_ms: int
    topics: dict[str, tuple[TopicConfig, str | None, bool]]
    transactions: TransactionService | None


_new_call = object.__new__


class SendPath(BrokerPart):
    """Stores batches of messages and answers one outcome per message."""

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        # the send contract's limits, read once: the config is frozen
        self._max_body = self.config.store.max_message_size
        self._max_delay_ms = int(self.config.max_delay * 1000)
        self._hosts: dict[str, bytes] = {}
        # per topic name: its config as last checked writable, type, retry flag (_check_topic)
        self._known_topics: dict[str, tuple[TopicConfig, str | None, bool]] = {}
        self._slowest: dict[tuple[str, int], tuple[float, int]] = {}

    async def send(
        self,
        messages: Sequence[InboundMessage],
        *,
        producer_group: str = "",
        born_host: str = "",
    ) -> list[SendOutcome]:
        """Store a batch; one outcome per message, in order (waits for a sync flush and a
        synchronous slave)."""
        outcomes, wait_end = self.send_now(
            messages, producer_group=producer_group, born_host=born_host
        )
        if wait_end:
            return await self.settle(outcomes, wait_end)
        return outcomes

    def send_now(
        self,
        messages: Sequence[InboundMessage],
        *,
        producer_group: str = "",
        born_host: str = "",
        redrive: bool = False,
    ) -> tuple[list[SendOutcome], int]:
        """Store a batch without waiting. Returns the outcomes and the log offset :meth:`settle`
        must wait for before they may be answered (a sync flush, a synchronous slave), or 0.

        ``redrive``: copies of messages the broker accepted before (dead letters sent again),
        whose kind need not match their topic's type any more (a released delayed message is
        a normal one)."""
        [answer] = self.send_now_many([SendBatch(messages, producer_group, born_host, redrive)])
        if isinstance(answer, PocketMQError):
            raise answer
        return answer

    def sends_wait(self) -> bool:
        """Whether a send is settled after its append — a sync flush or a ``sync`` slave — so
        sends arriving meanwhile can share the next append and its wait (a group commit); with
        neither, an append never suspends and there is nothing to share."""
        replication = self._shared.replication  # the property's check, without its frame
        assert replication is not None
        return self._sync_flush or replication.mode is _SYNC

    def send_now_many(
        self, batches: Sequence[SendBatch]
    ) -> list[tuple[list[SendOutcome], int] | PocketMQError]:
        """Store several senders' batches in one store append (the requests one read of a
        connection brought: docs/design.md "Sending"). Each batch gets what :meth:`send_now`
        would answer it: its outcomes and the offset to settle, or the error that refused it
        whole. Batches are stored in the order given.

        First why no message may be stored now (shutting down, a slave, fenced, overloaded;
        the batches' messages are counted only when flow control refuses them), then each
        message checked and prepared (:meth:`_prepare`), then one append (:meth:`_store`)."""
        if self._shared.closed:
            return [ServiceUnavailableError("the broker is shutting down")] * len(batches)
        roles = self._shared.roles  # the ``roles`` property's check, without its frame
        assert roles is not None
        refusal: PocketMQError | None = roles.write_refusal("send to its master")
        if refusal is None:
            overload = self.flow.overload_reason(self.store.busy)
            if overload is not None:
                self.flow.rejected += sum(len(batch.messages) for batch in batches)
                refusal = TooManyRequestsError(f"flow control: {overload}; back off and retry")
        if refusal is not None:
            return [refusal] * len(batches)
        answers: list[tuple[list[SendOutcome], int] | PocketMQError] = []
        to_store: list[StoreMessage] = []
        # per batch: its outcomes, None where a prepared message's store result goes
        slots: list[list[SendOutcome | None] | None] = []
        call = _new_call(_Call)  # without an __init__ frame: one per call
        call.transactions = self._shared.transactions
        # the clock read once a call (its messages are stored in one append, which stamps
        # them with one store time too)
        call.now_ms = int(self._clock() * 1000)
        call.topics = {}
        for batch in batches:
            messages = batch.messages
            if len(messages) > self.config.max_batch_messages:
                answers.append(
                    InvalidArgumentError(
                        f"a batch holds at most {self.config.max_batch_messages} messages"
                    )
                )
                slots.append(None)
                continue
            host = self._hosts.get(batch.born_host)
            if host is None:
                host = self._hosts[batch.born_host] = pack_host(batch.born_host)
            outcomes: list[SendOutcome | None] = []
            group = batch.producer_group
            check_kind = not batch.redrive
            for message in messages:
                try:
                    to_store.append(self._prepare(message, host, group, check_kind, call))
                except BrokerError as exc:
                    outcomes.append(
                        SendOutcome(
                            code=exc.code,
                            remark=str(exc),
                            topic=message.topic,
                            rule=getattr(exc, "rule", ""),
                        )
                    )
                    continue
                outcomes.append(None)
            answers.append(([], 0))
            slots.append(outcomes)
        self._store(to_store, slots, answers)
        return answers

    def _store(
        self,
        to_store: list[StoreMessage],
        slots: list[list[SendOutcome | None] | None],
        answers: list[tuple[list[SendOutcome], int] | PocketMQError],
    ) -> None:
        """One store append for every prepared message, what follows it (transaction
        bookkeeping, traffic counters, waking the queues' readers), and each batch's answer
        put in ``answers``: its outcomes and, for a send that waits, the log offset to settle
        (the one pass over the results does both)."""
        results = self.store.append(to_store) if to_store else []
        if to_store:
            transactions = self._shared.transactions  # the property's check, without its frame
            assert transactions is not None
            if transactions.holding:  # ``stored``'s own first test, without its frame
                transactions.stored(to_store, results)
        waits = self.sends_wait()
        touched: set[tuple[str, int]] = set()
        end = 0
        counted: list[tuple[str, int]] = []  # (topic, body size) of each stored message
        taken = 0  # messages of ``to_store`` whose outcome is filled in
        for number, slot in enumerate(slots):
            if slot is None:
                continue
            reached = 0  # the log offset this batch's stored messages reach
            filled: list[SendOutcome] = []
            for outcome in slot:
                if outcome is None:
                    stored = to_store[taken]
                    result = results[taken]
                    taken += 1
                    status = result.status
                    if status is _PUT_OK or status.stored:  # identity first: no enum hash
                        topic = stored.topic
                        touched.add((topic, stored.queue_id))
                        reach = result.physical_offset + result.size
                        if reach > reached:
                            reached = reach
                        counted.append((topic, len(stored.body)))
                    code = _SUCCESS if status is _PUT_OK else PUT_CODES[status]  # no enum hash
                    if stored.topic in HELD_TOPICS:  # delayed or half
                        outcome = self._held_outcome(stored, result, code)
                    else:  # positional: code, remark, message_id, queue_id, queue_offset,
                        # physical_offset, transaction_id, topic
                        outcome = SendOutcome(
                            code,
                            result.reason,
                            stored.properties.get(props.MESSAGE_ID, ""),
                            result.queue_id,
                            result.queue_offset,
                            result.physical_offset,
                            "",
                            stored.topic,
                        )
                filled.append(outcome)
            if reached > end:
                end = reached
            # the offset to settle: only a send that waits needs it
            answers[number] = (filled, reached if waits else 0)
        if to_store:
            self.traffic.stored_many(counted)
            self._appender.wake(touched, end)
            self.counters["messages_in"] += len(counted)

    async def settle(self, outcomes: list[SendOutcome], end: int) -> list[SendOutcome]:
        """Wait until the records up to ``end`` are as safe as the broker promises: fsynced
        (sync flush) and on a slave (sync replication). A wait that fails turns successes into
        the weaker outcome: FLUSH_DISK_TIMEOUT (stored, not yet known durable), STORAGE_FAILED
        (the fsync failed), SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT (on the master only)."""
        weaker: tuple[Code, str] | None = None
        if self._sync_flush and not await self._appender.flushed(end):
            weaker = (Code.FLUSH_DISK_TIMEOUT, "stored, not yet flushed")
            if self.store.failure:  # fsync failed: maybe not stored (docs/storage-format.md §5)
                weaker = (Code.STORAGE_FAILED, self.store.failure)
        if weaker is None:
            outcome = await self.replication.wait(end)
            if outcome is ReplicaOutcome.SLAVE_NOT_AVAILABLE:
                weaker = (Code.SLAVE_NOT_AVAILABLE, "stored on the master; no slave is in sync")
            elif outcome is ReplicaOutcome.FLUSH_SLAVE_TIMEOUT:
                weaker = (Code.FLUSH_SLAVE_TIMEOUT, "stored on the master; the slave is late")
        if weaker is None:
            return outcomes
        code, remark = weaker
        return [
            msgspec.structs.replace(o, code=code, remark=remark) if o.code is Code.SUCCESS else o
            for o in outcomes
        ]

    def _prepare(
        self,
        message: InboundMessage,
        host: bytes,
        producer_group: str,
        check_kind: bool,
        call: _Call,
    ) -> StoreMessage:
        name = message.topic
        known = call.topics.get(name)
        if known is None:
            # what an earlier call found, trusted while the topic manager still holds that
            # very config: a TopicConfig is frozen, so the same object is writable and of the
            # same type as when it was checked, and a topic updated, deleted or created again
            # is a new object (or none), checked afresh
            known = self._known_topics.get(name)
            if known is None or self.topics.get(name) is not known[0]:
                known = self._check_topic(name)
            if known[1] is not None:  # a user topic: remembered for the rest of the call
                call.topics[name] = known
        topic, topic_type, retry = known
        body = message.body
        properties = message.properties
        now_ms = call.now_ms
        violation = check_message(
            topic.name,
            len(body),
            properties,
            flags=message.flags,
            born_timestamp=message.born_timestamp,
            max_body=self._max_body,
            topic_type=topic_type if check_kind else None,
            now_ms=now_ms,
            max_delay_ms=self._max_delay_ms,
        )
        if violation is not None:
            error = (
                MessageTooLargeError
                if violation.rule is Rule.BODY_TOO_LARGE
                else MessageIllegalError
            )
            raise error(violation.text, rule=violation.rule.value)
        if not properties.get(props.MESSAGE_ID):
            properties = {**properties, props.MESSAGE_ID: new_message_id()}
        queue_id = message.queue_id
        if not 0 <= queue_id < topic.queues:  # a queue the sender chose is taken as it is
            queue_id = self._select_queue(topic, queue_id, properties.get(props.MESSAGE_GROUP))
        if self.flow.max_queue_backlog is not None and not topic.system:
            backlog = self._backlog(topic.name, queue_id)
            if self.flow.backlog_exceeded(backlog):
                self.flow.rejected += 1
                raise TooManyRequestsError(
                    f"flow control: queue {topic.name}/{queue_id} holds {backlog} unconsumed "
                    f"messages (cap {self.flow.max_queue_backlog}); back off and retry"
                )
        # positional: topic, queue_id, body, properties, flags, born_timestamp, born_host
        stored = StoreMessage(
            topic.name,
            queue_id,
            body,
            properties,
            message.flags,
            message.born_timestamp or now_ms,
            host,
        )
        if retry:
            stored = self._resent_retry(stored)
        else:
            transactions = call.transactions or self.transactions
            if transactions.is_transactional(stored):
                return transactions.hold(stored, producer_group)  # a half message
        if props.DELAY_LEVEL not in properties and props.DELIVER_TIME_MS not in properties:
            return stored  # what _delay answers for a message that is not delayed
        return self._delay(stored, now_ms)

    def _check_topic(self, name: str) -> tuple[TopicConfig, str | None, bool]:
        """The writable topic ``name`` (refused as :meth:`BrokerPart._writable_topic` refuses
        it), its type (None for a system topic) and whether it is a retry topic, remembered
        across calls (:meth:`_prepare` trusts it while the topic manager holds that config)."""
        topic = self._writable_topic(name)
        retry = topic.name.startswith(RETRY_PREFIX)
        # ``_value_``: ``.value`` is a Python-level descriptor on 3.11 (enum.py), a frame
        known = (topic, None if topic.system else topic.topic_type._value_, retry)
        if topic.perm & PERM_WRITE:  # an auto-created topic comes back unchecked
            known_topics = self._known_topics
            if len(known_topics) >= _KNOWN_TOPICS:
                known_topics.clear()
            known_topics[name] = known
        return known

    def _resent_retry(self, message: StoreMessage) -> StoreMessage:
        """A consumer re-sent a failed message to its retry topic (its send-back failed):
        carry the reconsume count, and dead-letter it once the retries are used up."""
        if self._fault("retry_send"):
            raise BrokerError("injected retry-topic send failure (store fault rules)")
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
        due = int(due_text)  # the send contract checked it is epoch ms, not too far ahead
        if due <= now_ms:
            return message
        return self.schedule.schedule_at(message, due)

    def _backlog(self, topic: str, queue_id: int) -> int:
        """Newest offset minus the slowest committed offset of the groups reading this queue
        (0 when no group has committed yet). The slowest offset is looked up at most every
        100 ms per queue (on the monotonic clock: a step of the wall clock must not freeze it);
        the newest offset is always current."""
        key = (topic, queue_id)
        now = time.monotonic()
        cached = self._slowest.get(key)
        if cached is None or now - cached[0] >= 0.1:
            cached = (now, self.offsets.slowest(topic, queue_id))
            self._slowest[key] = cached
        committed = cached[1]
        return 0 if committed < 0 else self.store.max_offset(topic, queue_id) - committed

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

    def _held_outcome(self, stored: StoreMessage, result: PutResult, code: Code) -> SendOutcome:
        """The outcome of a message stored aside (delayed or half): the real offset comes
        later, the real topic and queue are properties."""
        message_id = stored.properties.get(props.MESSAGE_ID, "")
        recallable = stored.topic in SCHEDULE_TOPICS and result.status.stored
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
            or record.topic not in SCHEDULE_TOPICS
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
