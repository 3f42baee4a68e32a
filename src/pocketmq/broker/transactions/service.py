"""The transaction service: half messages in, one final outcome out.

A producer sends a *half message*; the broker stores it in the internal topic ``%SYS%TRANS_HALF``
(its real topic and queue in properties, like the schedule service does), where no consumer can
see it. The producer runs its local transaction and ends the transaction: **commit** copies the
message, same id, into its real topic; **rollback** leaves it where nobody reads it. Every
outcome is a record in a second internal topic, ``%SYS%TRANS_OP`` (the *op log*), keyed by message
id, so the outcome survives restarts and can be looked up.

A half message nobody ends within the transaction timeout (6 s) is *checked back*: the broker
asks a live producer of the same producer group (any of them: the one that sent it may be dead)
what became of the local transaction, then again every check interval (30 s). After the maximum
number of checks (15) without an answer the message is discarded, and that is recorded too.
Defaults are RocketMQ's broker code (``transactionTimeOut``, ``transactionCheckInterval``,
``transactionCheckMax``; docs/transactions.md says where they come from).

What pocketmq guarantees where RocketMQ users report anomalies (docs/transactions.md):

- **The first outcome is final.** A transaction is PREPARED until one outcome is recorded; after
  that a second identical end is answered OK and changes nothing, a conflicting one (commit after
  rollback, rollback after commit, commit after discard) is rejected with
  :class:`~pocketmq.errors.TransactionStateError`, whether it comes from the producer or from a
  late check answer. Ends are handled on the event loop without awaiting between the state test
  and the store append, so two concurrent ends cannot both win.
- **Commit is exactly once.** The committed copy and its op record are appended in one store
  call, the copy first; the copy carries the half message's physical offset
  (``prepared_transaction_offset``). On start, a half message without an op record whose
  committed copy exists (a crash between the two records) is recorded as committed instead of
  being checked and committed again.
- **No checks after the outcome.** A transaction leaves the pending set in the same step that
  records its outcome, so nothing can check it afterwards; answers to checks already sent are
  late answers (above).
- **Checks survive restarts.** Each check is an op record; on start the pending set is rebuilt
  from the half topic minus the op log, with each transaction's check count and last check time.
- **One transaction per message id.** A half message whose id already started a transaction on
  this broker is rejected, so a client resend cannot create two transactions under one id.

Only checks that reached a producer count toward the maximum: while no producer of the group is
connected the broker retries every second, and the transaction stays PREPARED (RocketMQ counts
those too and may discard a transaction whose local part committed while its producers were
being redeployed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

import msgspec

from pocketmq import properties as props
from pocketmq.broker.history import AttemptHistory
from pocketmq.broker.persist import OffLoopWriter, Sink, save_json
from pocketmq.broker.producers import CheckChannel, MayCheck, ProducerRegistry
from pocketmq.broker.statefile import load_struct
from pocketmq.broker.transactions.checker import CheckBack
from pocketmq.broker.transactions.model import (
    HALF_TOPIC,
    INTERNAL_PROPERTIES,
    TX_COMMIT,
    TX_MASK,
    TX_PREPARED,
    Pending,
)
from pocketmq.broker.transactions.oplog import Op, OpLog, make_op, op_message, status_from_op
from pocketmq.broker.transactions.recovery import rebuild
from pocketmq.errors import (
    BrokerInternalError,
    FlushDiskTimeoutError,
    MessageIllegalError,
    MessageNotFoundError,
    TransactionStateError,
)
from pocketmq.model.transactions import EndOutcome, TransactionState, TransactionStatus
from pocketmq.store import (
    MessageStore,
    PutResult,
    PutStatus,
    StoredMessage,
    StoreMessage,
    pack_host,
)

__all__ = ["TransactionService"]

log = logging.getLogger("pocketmq.broker")

_FINISHED_CACHE = 10_000

Append = Callable[[list[StoreMessage]], list[PutResult]]
Durable = Callable[[list[PutResult]], Awaitable[None]]


class _Progress(msgspec.Struct):
    # every half message below this queue offset has an outcome
    half_floor: Annotated[int, msgspec.Meta(ge=0)] = 0


class TransactionService:
    """Tracks transactions from their half message to their outcome (see the module doc)."""

    def __init__(
        self,
        store: MessageStore,
        config_dir: str,
        *,
        timeout: float,
        check_interval: float,
        check_max: int,
        producer_expiry: float,
        append: Append,
        durable: Durable,
        history: AttemptHistory,
        counters: collections.Counter[str],
        clock: Callable[[], float],
    ) -> None:
        if timeout < 0 or check_interval <= 0 or check_max < 0:
            raise ValueError(
                "transaction timeout must be >= 0, check interval > 0 and check max >= 0"
            )
        self.store = store
        self.timeout = timeout
        self.interval = check_interval
        self.check_max = check_max
        self.append = append
        self._durable = durable
        self.history = history
        self.counters = counters
        self.clock = clock
        self.producers = ProducerRegistry(producer_expiry)
        self._path = os.path.join(config_dir, "transactions.json")
        self.floor = load_struct(  # without it every half message is looked at again
            self._path, _Progress, "half messages are checked against the op log from the start"
        ).half_floor
        self.pending: dict[str, Pending] = {}
        self.holding: set[str] = set()  # half messages prepared, not yet appended
        self._finished: collections.OrderedDict[str, tuple[TransactionStatus, list[PutResult]]] = (
            collections.OrderedDict()
        )
        self._unflushed: list[tuple[int, int]] = []  # (half queue offset, end of its op record)
        self.wake: asyncio.Event | None = None
        self.wake_at = 0.0  # when the checker loop will look next
        self._persisted_at = 0.0
        self.writer = OffLoopWriter()
        self._task: asyncio.Task[None] | None = None
        self.oplog = OpLog(store)
        self._checker = CheckBack(self)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild the pending transactions from the logs, then start the check-back loop."""
        rebuild(self)
        self.wake = asyncio.Event()
        self._task = asyncio.create_task(self._checker.run(), name="transaction-checker")

    def check_due(self, now: float) -> None:
        """Check back every transaction whose check is due (checker.py)."""
        self._checker.check_due(now)

    async def close(self) -> None:
        """Stop the check-back loop and save the state, so a restart does not check again what was
        just answered."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.writer.drain()
        self.persist(force=True)

    def consumed_positions(self) -> dict[tuple[str, int], int]:
        """Where this service has read its internal queues up to (see Broker startup)."""
        return {(HALF_TOPIC, 0): self.floor}

    @property
    def pending_count(self) -> int:
        """How many transactions wait for an outcome (the broker's status)."""
        return len(self.pending)

    # -- prepare --------------------------------------------------------------------------

    @staticmethod
    def is_transactional(message: StoreMessage) -> bool:
        """Whether a stored message is a half message: the ``TRAN_MSG`` property or the record
        flags mark one, and a producer may use either (docs/protocol.md, "Messages on the
        wire")."""
        return (
            message.properties.get(props.TRANSACTION_PREPARED) == "true"
            or message.flags & TX_MASK == TX_PREPARED
        )

    def hold(self, message: StoreMessage, producer_group: str) -> StoreMessage:
        """The half-message form of ``message`` (validated; not stored yet)."""
        properties = dict(message.properties)
        message_id = properties.get(props.MESSAGE_ID, "")
        if not message_id or any(c.isspace() for c in message_id):
            raise MessageIllegalError("a transactional message needs a message id without spaces")
        if properties.get(props.DELAY_LEVEL, "0") != "0" or props.DELIVER_TIME_MS in properties:
            raise MessageIllegalError("a transactional message cannot also be a delayed message")
        group = properties.get(props.PRODUCER_GROUP) or producer_group
        if not group:
            raise MessageIllegalError(
                "a transactional message needs a producer group: the broker checks unfinished "
                "transactions back with a live producer of that group"
            )
        self._refuse_reused(message_id)
        properties[props.PRODUCER_GROUP] = group
        properties[props.TRANSACTION_PREPARED] = "true"
        properties[props.TRANSACTION_ID] = uuid.uuid4().hex.upper()
        properties[props.REAL_TOPIC] = message.topic
        properties[props.REAL_QUEUE_ID] = str(message.queue_id)
        properties.pop(props.DELAY_LEVEL, None)
        self.holding.add(message_id)
        return msgspec.structs.replace(
            message,
            topic=HALF_TOPIC,
            queue_id=0,
            properties=properties,
            flags=(message.flags & ~TX_MASK) | TX_PREPARED,
        )

    def _refuse_reused(self, message_id: str) -> None:
        if message_id in self.pending or message_id in self.holding:
            raise TransactionStateError(
                f"message id {message_id} already has a transaction in progress; every "
                "transactional message needs a new message id"
            )
        if any(r.topic == HALF_TOPIC for r in self.store.query_by_id(message_id, 8)):
            status = self.state(message_id)
            what = f"{status.state.value} transaction" if status else "transaction"
            raise TransactionStateError(
                f"message id {message_id} already started a {what} on this broker; every "
                "transactional message needs a new message id"
            )

    def stored(self, messages: Sequence[StoreMessage], results: Sequence[PutResult]) -> None:
        """Right after the store appended a batch: start tracking its half messages."""
        if not self.holding:
            return
        for message, result in zip(messages, results, strict=True):
            if message.topic != HALF_TOPIC:
                continue
            message_id = message.properties.get(props.MESSAGE_ID, "")
            self.holding.discard(message_id)
            if not result.status.stored:
                continue
            prepared_at = result.store_timestamp / 1000 if result.store_timestamp else self.clock()
            entry = Pending(
                message_id=message_id,
                transaction_id=message.properties[props.TRANSACTION_ID],
                producer_group=message.properties[props.PRODUCER_GROUP],
                topic=message.properties[props.REAL_TOPIC],
                queue_id=int(message.properties[props.REAL_QUEUE_ID]),
                half_offset=result.physical_offset,
                half_queue_offset=result.queue_offset,
                prepared_at=prepared_at,
                next_check_at=prepared_at + self.timeout,
            )
            self.pending[message_id] = entry
            self.counters["transactions_prepared"] += 1
            self.record(entry, "TX_PREPARED", attempt=0)
            if entry.next_check_at < self.wake_at and self.wake is not None:
                self.wake.set()  # due before the checker's next look (short timeouts)

    # -- end ------------------------------------------------------------------------------

    async def end(
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
        """Commit or roll back. The first outcome wins; see the module docstring. The request
        must name the half message's producer group, topic and transaction id, all three: a
        message id alone is public enough (it travels with every delivery) that it cannot be
        what lets a client end someone else's transaction (docs/transactions.md, "3. Ending").
        ``by``: the authenticated user asking, recorded with the outcome."""
        source = "check" if from_check else "client"
        entry = self.pending.get(message_id)
        if entry is None:
            return await self._ended_already(
                message_id, (producer_group, topic, transaction_id), commit, source
            )
        _refuse_mismatch(
            message_id,
            (entry.producer_group, entry.topic, entry.transaction_id),
            (producer_group, topic, transaction_id),
        )
        now = self.clock()
        records: list[StoreMessage] = []
        if commit:
            half = self.store.read_message(entry.half_offset)
            if half is None or half.message_id != message_id:
                raise BrokerInternalError(
                    f"the half message of transaction {entry.transaction_id} is unreadable"
                )
            records.append(self._committed_copy(half, entry))
        detail = f"ended by user {by!r}" if by else ""
        op = make_op(entry, "commit" if commit else "rollback", now, source, detail)
        records.append(op_message(op))
        # no await between the pending test above and this append: ends cannot interleave
        results = self.append(records)
        if not results[0].status.stored:
            failed = results[0]
            raise BrokerInternalError(
                f"recording the {op.op} failed: {failed.reason or failed.status.value}; "
                "the transaction is still open, end it again"
            )
        if not results[-1].status.stored:  # the copy is in, its op record is not
            log.error(
                "transaction %s committed but its op record was not stored (%s); the next "
                "start records it from the committed copy",
                entry.transaction_id,
                results[-1].reason or results[-1].status.value,
            )
        status = self.finish(entry, op, results)
        self.counters["transactions_committed" if commit else "transactions_rolled_back"] += 1
        await self._durable(results)
        if any(r.status is PutStatus.FLUSH_DISK_TIMEOUT for r in results):
            raise FlushDiskTimeoutError(
                f"the {op.op} of transaction {entry.transaction_id} is recorded but not yet "
                "flushed to disk; ending it again is safe"
            )
        return EndOutcome(status)

    async def _ended_already(
        self, message_id: str, named: tuple[str, str, str], commit: bool, source: str
    ) -> EndOutcome:
        if message_id in self.holding:
            raise TransactionStateError(f"the half message {message_id} is still being stored")
        status = self.state(message_id)
        if status is None:
            raise MessageNotFoundError(
                f"no transaction for message {message_id} on this broker (never prepared "
                "here, or aged out of the store)"
            )
        _refuse_mismatch(
            message_id, (status.producer_group, status.topic, status.transaction_id), named
        )
        wanted = TransactionState.COMMITTED if commit else TransactionState.ROLLED_BACK
        if status.state is wanted or (status.state is TransactionState.DISCARDED and not commit):
            self.counters["transaction_duplicate_ends"] += 1
            cached = self._finished.get(message_id)
            if cached is not None and cached[1]:
                await self._durable(list(cached[1]))
            return EndOutcome(status, duplicate=True)
        self.counters["transaction_conflicting_ends"] += 1
        verb = "commit" if commit else "rollback"
        by = {"client": "the producer", "check": "a check answer", "broker": "the broker"}.get(
            status.source, status.source
        )
        reason = f" ({status.detail})" if status.detail else ""
        raise TransactionStateError(
            f"transaction {status.transaction_id} of message {message_id} was already "
            f"{status.state.value} by {by}{reason}; this {verb} "
            f"{'(a late check answer) ' if source == 'check' else ''}is rejected and changes "
            "nothing"
        )

    def _committed_copy(self, half: StoredMessage, entry: Pending) -> StoreMessage:
        properties = {k: v for k, v in half.properties.items() if k not in INTERNAL_PROPERTIES}
        return StoreMessage(
            topic=entry.topic,
            queue_id=entry.queue_id,
            body=half.body,
            properties=properties,
            flags=(half.flags & ~TX_MASK) | TX_COMMIT,
            born_timestamp=half.born_timestamp,
            born_host=pack_host(half.born_host),
            prepared_transaction_offset=half.physical_offset,
        )

    def finish(self, entry: Pending, op: Op, results: list[PutResult]) -> TransactionStatus:
        """Take ``entry`` out of the pending set with outcome ``op`` (already appended)."""
        self.pending.pop(entry.message_id, None)
        status = status_from_op(op)
        self.remember(status, results)
        op_result = results[-1]
        if op_result.status.stored:
            self._unflushed.append(
                (entry.half_queue_offset, op_result.physical_offset + op_result.size)
            )
        outcome = {
            TransactionState.COMMITTED: "TX_COMMIT",
            TransactionState.ROLLED_BACK: "TX_ROLLBACK",
            TransactionState.DISCARDED: "TX_DISCARD",
        }[status.state]
        self.record(entry, outcome, attempt=entry.checks, error=op.detail or f"by {op.source}")
        return status

    def remember(self, status: TransactionStatus, results: list[PutResult]) -> None:
        """Keep a finished transaction's status and results in a bounded cache, so a retried end
        gets the same answer without reading the op log."""
        self._finished[status.message_id] = (status, results)
        self._finished.move_to_end(status.message_id)
        while len(self._finished) > _FINISHED_CACHE:
            self._finished.popitem(last=False)

    # -- queries --------------------------------------------------------------------------

    def state(self, message_id: str) -> TransactionStatus | None:
        """The broker's record of a message's transaction (pending, recently finished, or from the
        op log), or None when there is none."""
        entry = self.pending.get(message_id)
        if entry is not None:
            return self._pending_status(entry)
        cached = self._finished.get(message_id)
        if cached is not None:
            return cached[0]
        final = self.oplog.final(message_id)
        if final is None:
            return None
        status = status_from_op(final)
        self.remember(status, [])
        return status

    def _pending_status(self, entry: Pending) -> TransactionStatus:
        if entry.waiting_since:
            detail = f"no live producer of group {entry.producer_group!r} to check with"
        elif entry.checks:
            by = f", last with {entry.last_checked_by}" if entry.last_checked_by else ""
            detail = f"checked {entry.checks} times{by}; no answer yet"
        else:
            detail = "waiting for the producer to end it"
        return TransactionStatus(
            message_id=entry.message_id,
            transaction_id=entry.transaction_id,
            producer_group=entry.producer_group,
            topic=entry.topic,
            queue_id=entry.queue_id,
            state=TransactionState.PREPARED,
            checks=entry.checks,
            prepared_at=entry.prepared_at,
            updated_at=entry.last_check_at or entry.prepared_at,
            detail=detail,
        )

    def persist(self, *, force: bool = False, sink: Sink | None = None) -> None:
        """Save the half-topic floor (at most once a second unless forced): below it every
        half message has an outcome that is flushed to disk."""
        now = self.clock()
        if not force and 0 <= now - self._persisted_at < 1.0:  # < 0: the clock stepped back
            return
        self._persisted_at = now
        flushed = self.store.statistics().flushed_position
        self._unflushed = [(q, end) for q, end in self._unflushed if end > flushed]
        candidates = [e.half_queue_offset for e in self.pending.values()]
        candidates += [q for q, _ in self._unflushed]
        floor = min(candidates, default=self.store.max_offset(HALF_TOPIC, 0))
        if floor > self.floor:
            self.floor = floor
            save_json(self._path, _Progress(half_floor=floor), sink)

    # -- producers ------------------------------------------------------------------------

    def heartbeat(
        self,
        client_id: str,
        groups: Sequence[str],
        channel: CheckChannel,
        owner: object,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """A producer of ``groups`` is live: transactions that waited for one are checked now."""
        now = self.clock()
        self.producers.heartbeat(
            client_id, groups, channel, now, owner, user=user, may_check=may_check
        )
        waiting = [
            e for e in self.pending.values() if e.waiting_since and e.producer_group in groups
        ]
        for entry in waiting:
            entry.next_check_at = min(entry.next_check_at, now)
        if waiting and self.wake is not None:
            self.wake.set()

    # -- history --------------------------------------------------------------------------

    def record(
        self, entry: Pending, outcome: str, *, attempt: int, consumer: str = "", error: str = ""
    ) -> None:
        """Record a transaction step in the attempt history, so ``pocketmq message history`` shows
        checks and outcomes beside deliveries."""
        self.history.record(
            message_id=entry.message_id,
            group=entry.producer_group,
            topic=entry.topic,
            attempt=attempt,
            outcome=outcome,
            consumer=consumer,
            error=error,
        )


_END_FIELDS = ("transaction id", "producer group", "topic")


def _refuse_mismatch(
    message_id: str, half: tuple[str, str, str], named: tuple[str, str, str]
) -> None:
    """Refuse an end whose (producer group, topic, transaction id) are not the half message's.
    The error says which field differs, never what it should be: the transaction id (random,
    known only to the producer and its group's checkers) is compared first, so nobody without
    it learns anything about the others."""
    group, topic, transaction = half
    given_group, given_topic, given_transaction = named
    for name, expected, given in zip(
        _END_FIELDS,
        (transaction, group, topic),
        (given_transaction, given_group, given_topic),
        strict=True,
    ):
        if given != expected:
            what = f"names no {name}" if not given else f"{name} {given!r} does not match"
            raise TransactionStateError(
                f"message {message_id}: the end {what} (an end must name its half message's "
                "producer group, topic and transaction id)"
            )
