"""Transactional messages: half messages, commit or rollback, and check-back (seeds 000 and 004).

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
import enum
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

import msgspec

from pocketmq import properties as props
from pocketmq.broker.history import AttemptHistory
from pocketmq.broker.model import Delivered
from pocketmq.broker.persist import OffLoopWriter, Sink, save_json
from pocketmq.broker.producers import CheckChannel, ProducerRegistry
from pocketmq.broker.statefile import load_struct
from pocketmq.errors import (
    BrokerInternalError,
    FlushDiskTimeoutError,
    MessageIllegalError,
    MessageNotFoundError,
    TransactionStateError,
)
from pocketmq.store import (
    MessageStore,
    PutResult,
    PutStatus,
    StoredMessage,
    StoreMessage,
    pack_host,
)

__all__ = [
    "HALF_TOPIC",
    "OP_TOPIC",
    "EndOutcome",
    "TransactionCheck",
    "TransactionService",
    "TransactionState",
    "TransactionStatus",
]

log = logging.getLogger("pocketmq.broker")

HALF_TOPIC = "%SYS%TRANS_HALF"
OP_TOPIC = "%SYS%TRANS_OP"

# record flags, bits 0-1 (docs/storage-format.md)
TX_MASK = 0b11
TX_PREPARED = 1
TX_COMMIT = 2
TX_ROLLBACK = 3

_FINISHED_CACHE = 10_000
_NO_PRODUCER_RETRY = 1.0
_OP_LOOKUP_LIMIT = 256
_INTERNAL_PROPERTIES = frozenset(
    {props.REAL_TOPIC, props.REAL_QUEUE_ID, props.TRANSACTION_PREPARED, props.CHECK_TIMES}
)

Append = Callable[[list[StoreMessage]], list[PutResult]]
Durable = Callable[[list[PutResult]], Awaitable[None]]


class TransactionState(enum.Enum):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"

    @property
    def final(self) -> bool:
        return self is not TransactionState.PREPARED


class TransactionStatus(msgspec.Struct, frozen=True):
    """What the broker knows about one transaction. Times are epoch seconds."""

    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    state: TransactionState
    checks: int
    prepared_at: float
    updated_at: float
    source: str = ""  # who decided: client | check | broker | recovery
    detail: str = ""


class EndOutcome(msgspec.Struct, frozen=True):
    status: TransactionStatus
    duplicate: bool = False  # the transaction had already ended this way: nothing changed


class TransactionCheck(msgspec.Struct, frozen=True):
    """A check-back the broker asks a producer: what became of this local transaction?"""

    producer_group: str
    transaction_id: str
    check_number: int
    message: Delivered


class _Op(msgspec.Struct, frozen=True, array_like=True):
    """One op-log record (the body of a ``%SYS%TRANS_OP`` record, MessagePack)."""

    op: str  # commit | rollback | discard | check
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    half_offset: int
    prepared_at_ms: int
    at_ms: int
    checks: int  # checks made so far (for a check: its number)
    source: str  # client | check | broker | recovery
    detail: str = ""


_OP_STATES = {
    "commit": TransactionState.COMMITTED,
    "rollback": TransactionState.ROLLED_BACK,
    "discard": TransactionState.DISCARDED,
}
_OP_FLAGS = {"commit": TX_COMMIT, "rollback": TX_ROLLBACK, "discard": TX_ROLLBACK, "check": 0}
_encode_op = msgspec.msgpack.Encoder().encode
_decode_op = msgspec.msgpack.Decoder(_Op).decode


class _Progress(msgspec.Struct):
    # every half message below this queue offset has an outcome
    half_floor: Annotated[int, msgspec.Meta(ge=0)] = 0


@dataclass(slots=True)
class _Pending:
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    half_offset: int
    half_queue_offset: int
    prepared_at: float
    next_check_at: float
    checks: int = 0
    last_check_at: float = 0.0
    last_checked_by: str = ""
    waiting_since: float = 0.0  # no live producer of the group since then (0: one was there)


class TransactionService:
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
        self._store = store
        self._timeout = timeout
        self._interval = check_interval
        self._check_max = check_max
        self._append = append
        self._durable = durable
        self._history = history
        self._counters = counters
        self._clock = clock
        self.producers = ProducerRegistry(producer_expiry)
        self._path = os.path.join(config_dir, "transactions.json")
        self._floor = load_struct(  # without it every half message is looked at again
            self._path, _Progress, "half messages are checked against the op log from the start"
        ).half_floor
        self._pending: dict[str, _Pending] = {}
        self._holding: set[str] = set()  # half messages prepared, not yet appended
        self._finished: collections.OrderedDict[str, tuple[TransactionStatus, list[PutResult]]] = (
            collections.OrderedDict()
        )
        self._unflushed: list[tuple[int, int]] = []  # (half queue offset, end of its op record)
        self._wake: asyncio.Event | None = None
        self._wake_at = 0.0  # when the checker loop will look next
        self._persisted_at = 0.0
        self._writer = OffLoopWriter()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._rebuild()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="transaction-checker")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._writer.drain()
        self.persist(force=True)

    def consumed_positions(self) -> dict[tuple[str, int], int]:
        """Where this service has read its internal queues up to (see Broker startup)."""
        return {(HALF_TOPIC, 0): self._floor}

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # -- prepare --------------------------------------------------------------------------

    @staticmethod
    def is_transactional(message: StoreMessage) -> bool:
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
        self._holding.add(message_id)
        return msgspec.structs.replace(
            message,
            topic=HALF_TOPIC,
            queue_id=0,
            properties=properties,
            flags=(message.flags & ~TX_MASK) | TX_PREPARED,
        )

    def _refuse_reused(self, message_id: str) -> None:
        if message_id in self._pending or message_id in self._holding:
            raise TransactionStateError(
                f"message id {message_id} already has a transaction in progress; every "
                "transactional message needs a new message id"
            )
        if any(r.topic == HALF_TOPIC for r in self._store.query_by_id(message_id, 8)):
            status = self.state(message_id)
            what = f"{status.state.value} transaction" if status else "transaction"
            raise TransactionStateError(
                f"message id {message_id} already started a {what} on this broker; every "
                "transactional message needs a new message id"
            )

    def stored(self, messages: Sequence[StoreMessage], results: Sequence[PutResult]) -> None:
        """Right after the store appended a batch: start tracking its half messages."""
        if not self._holding:
            return
        for message, result in zip(messages, results, strict=True):
            if message.topic != HALF_TOPIC:
                continue
            message_id = message.properties.get(props.MESSAGE_ID, "")
            self._holding.discard(message_id)
            if not result.status.stored:
                continue
            prepared_at = result.store_timestamp / 1000 if result.store_timestamp else self._clock()
            entry = _Pending(
                message_id=message_id,
                transaction_id=message.properties[props.TRANSACTION_ID],
                producer_group=message.properties[props.PRODUCER_GROUP],
                topic=message.properties[props.REAL_TOPIC],
                queue_id=int(message.properties[props.REAL_QUEUE_ID]),
                half_offset=result.physical_offset,
                half_queue_offset=result.queue_offset,
                prepared_at=prepared_at,
                next_check_at=prepared_at + self._timeout,
            )
            self._pending[message_id] = entry
            self._counters["transactions_prepared"] += 1
            self._record(entry, "TX_PREPARED", attempt=0)
            if entry.next_check_at < self._wake_at and self._wake is not None:
                self._wake.set()  # due before the checker's next look (short timeouts)

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
    ) -> EndOutcome:
        """Commit or roll back. The first outcome wins; see the module docstring."""
        source = "check" if from_check else "client"
        entry = self._pending.get(message_id)
        if entry is None:
            return await self._ended_already(message_id, transaction_id, commit, source)
        if transaction_id and transaction_id != entry.transaction_id:
            raise TransactionStateError(
                f"message {message_id} belongs to transaction {entry.transaction_id}, "
                f"not {transaction_id}"
            )
        if topic and topic != entry.topic:
            raise TransactionStateError(
                f"message {message_id} was sent to topic {entry.topic!r}, not {topic!r}"
            )
        now = self._clock()
        records: list[StoreMessage] = []
        if commit:
            half = self._store.read_message(entry.half_offset)
            if half is None or half.message_id != message_id:
                raise BrokerInternalError(
                    f"the half message of transaction {entry.transaction_id} is unreadable"
                )
            records.append(self._committed_copy(half, entry))
        op = self._op(entry, "commit" if commit else "rollback", now, source)
        records.append(self._op_message(op))
        # no await between the pending test above and this append: ends cannot interleave
        results = self._append(records)
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
        status = self._finish(entry, op, results)
        self._counters["transactions_committed" if commit else "transactions_rolled_back"] += 1
        await self._durable(results)
        if any(r.status is PutStatus.FLUSH_DISK_TIMEOUT for r in results):
            raise FlushDiskTimeoutError(
                f"the {op.op} of transaction {entry.transaction_id} is recorded but not yet "
                "flushed to disk; ending it again is safe"
            )
        return EndOutcome(status)

    async def _ended_already(
        self, message_id: str, transaction_id: str, commit: bool, source: str
    ) -> EndOutcome:
        if message_id in self._holding:
            raise TransactionStateError(f"the half message {message_id} is still being stored")
        status = self.state(message_id)
        if status is None:
            raise MessageNotFoundError(
                f"no transaction for message {message_id} on this broker (never prepared "
                "here, or aged out of the store)"
            )
        if transaction_id and status.transaction_id != transaction_id:
            raise TransactionStateError(
                f"message {message_id} belongs to transaction {status.transaction_id}, "
                f"not {transaction_id}"
            )
        wanted = TransactionState.COMMITTED if commit else TransactionState.ROLLED_BACK
        if status.state is wanted or (status.state is TransactionState.DISCARDED and not commit):
            self._counters["transaction_duplicate_ends"] += 1
            cached = self._finished.get(message_id)
            if cached is not None and cached[1]:
                await self._durable(list(cached[1]))
            return EndOutcome(status, duplicate=True)
        self._counters["transaction_conflicting_ends"] += 1
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

    def _committed_copy(self, half: StoredMessage, entry: _Pending) -> StoreMessage:
        properties = {k: v for k, v in half.properties.items() if k not in _INTERNAL_PROPERTIES}
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

    def _op(self, entry: _Pending, kind: str, now: float, source: str, detail: str = "") -> _Op:
        return _Op(
            op=kind,
            message_id=entry.message_id,
            transaction_id=entry.transaction_id,
            producer_group=entry.producer_group,
            topic=entry.topic,
            queue_id=entry.queue_id,
            half_offset=entry.half_offset,
            prepared_at_ms=int(entry.prepared_at * 1000),
            at_ms=int(now * 1000),
            checks=entry.checks,
            source=source,
            detail=detail,
        )

    @staticmethod
    def _op_message(op: _Op) -> StoreMessage:
        return StoreMessage(
            topic=OP_TOPIC,
            queue_id=0,
            body=_encode_op(op),
            properties={props.KEYS: op.message_id},
            flags=_OP_FLAGS[op.op],
            prepared_transaction_offset=op.half_offset,
        )

    def _finish(self, entry: _Pending, op: _Op, results: list[PutResult]) -> TransactionStatus:
        """Take ``entry`` out of the pending set with outcome ``op`` (already appended)."""
        self._pending.pop(entry.message_id, None)
        status = _status_from_op(op)
        self._remember(status, results)
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
        self._record(entry, outcome, attempt=entry.checks, error=op.detail or f"by {op.source}")
        return status

    def _remember(self, status: TransactionStatus, results: list[PutResult]) -> None:
        self._finished[status.message_id] = (status, results)
        self._finished.move_to_end(status.message_id)
        while len(self._finished) > _FINISHED_CACHE:
            self._finished.popitem(last=False)

    # -- queries --------------------------------------------------------------------------

    def state(self, message_id: str) -> TransactionStatus | None:
        entry = self._pending.get(message_id)
        if entry is not None:
            return self._pending_status(entry)
        cached = self._finished.get(message_id)
        if cached is not None:
            return cached[0]
        final = self._final_op(message_id)
        if final is None:
            return None
        status = _status_from_op(final)
        self._remember(status, [])
        return status

    def _pending_status(self, entry: _Pending) -> TransactionStatus:
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

    def _ops(self, message_id: str, half_offset: int | None = None) -> list[_Op]:
        found: list[_Op] = []
        for record in self._store.query_by_key(OP_TOPIC, message_id, _OP_LOOKUP_LIMIT):
            try:
                op = _decode_op(record.body)
            except msgspec.DecodeError:
                log.error("op-log record at %d does not decode; ignored", record.physical_offset)
                continue
            if op.message_id == message_id and (
                half_offset is None or op.half_offset == half_offset
            ):
                found.append(op)
        return sorted(found, key=lambda o: o.at_ms)

    def _final_op(self, message_id: str, half_offset: int | None = None) -> _Op | None:
        return next((o for o in self._ops(message_id, half_offset) if o.op in _OP_STATES), None)

    # -- check-back -----------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            now = self._clock()
            delay = 1.0
            try:
                self.producers.expire(now)
                self.check_due(now)
                writes: list[tuple[str, bytes]] = []
                self.persist(sink=writes.append)
                await self._writer.write(writes)
                earliest = min((e.next_check_at for e in self._pending.values()), default=None)
                if earliest is not None:
                    delay = min(delay, max(0.0, earliest - self._clock()))
            except Exception:
                log.exception("transaction check-back failed; retrying in 1 s")
            self._wake_at = self._clock() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def check_due(self, now: float) -> None:
        """Check back every transaction whose check is due; discard those out of checks."""
        due = sorted(
            (e for e in self._pending.values() if e.next_check_at <= now),
            key=lambda e: e.next_check_at,
        )
        if not due:
            return
        ops: list[_Op] = []
        ended: list[tuple[_Pending, _Op]] = []
        for entry in due:
            if entry.checks >= self._check_max:
                detail = f"no outcome after {entry.checks} checks"
                op = self._op(entry, "discard", now, "broker", detail)
                ops.append(op)
                ended.append((entry, op))
                continue
            half = self._store.read_message(entry.half_offset)
            if half is None or half.message_id != entry.message_id:
                op = self._op(entry, "discard", now, "broker", "half message no longer stored")
                ops.append(op)
                ended.append((entry, op))
                continue
            number = entry.checks + 1
            check = TransactionCheck(
                entry.producer_group, entry.transaction_id, number, _check_view(half, entry, number)
            )
            client = self.producers.deliver(entry.producer_group, check)
            if client is None:
                entry.next_check_at = now + min(self._interval, _NO_PRODUCER_RETRY)
                if not entry.waiting_since:
                    entry.waiting_since = now
                    self._counters["transaction_checks_without_producer"] += 1
                    log.warning(
                        "transaction %s (message %s) is due for a check but no producer of "
                        "group %r is connected; retrying every second",
                        entry.transaction_id,
                        entry.message_id,
                        entry.producer_group,
                    )
                continue
            entry.waiting_since = 0.0
            entry.checks = number
            entry.last_check_at = now
            entry.last_checked_by = client
            entry.next_check_at = now + self._interval
            ops.append(self._op(entry, "check", now, "broker", f"asked {client}"))
            self._counters["transaction_checks"] += 1
            self._record(entry, "TX_CHECK", attempt=number, consumer=client)
        if not ops:
            return
        # check records need no fsync wait: a lost one means one more check after a crash
        results = self._append([self._op_message(op) for op in ops])
        by_op = dict(zip((id(op) for op in ops), results, strict=True))
        for entry, op in ended:
            self._finish(entry, op, [by_op[id(op)]])
            self._counters["transactions_discarded"] += 1
            log.warning(
                "transaction %s (message %s, group %r) discarded: %s",
                entry.transaction_id,
                entry.message_id,
                entry.producer_group,
                op.detail,
            )

    # -- restart --------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Pending transactions = half messages (from the saved floor) without an outcome."""
        offset = max(self._floor, self._store.min_offset(HALF_TOPIC, 0))
        recovered: list[StoreMessage] = []
        while True:
            entries = self._store.read_queue(HALF_TOPIC, 0, offset, 1024)
            if not entries:
                break
            for queue_entry in entries:
                record = self._store.read_message(queue_entry.physical_offset)
                if record is not None:
                    op = self._recover(record, queue_entry.queue_offset)
                    if op is not None:
                        recovered.append(self._op_message(op))
            offset = entries[-1].queue_offset + 1
        if recovered:
            self._append(recovered)
        if self._pending or recovered:
            log.info(
                "transactions: %d pending after restart, %d commits recovered from their copies",
                len(self._pending),
                len(recovered),
            )

    def _recover(self, record: StoredMessage, queue_offset: int) -> _Op | None:
        message_id = record.message_id
        properties = record.properties
        if message_id in self._pending or props.REAL_TOPIC not in properties:
            return None
        ops = self._ops(message_id, record.physical_offset)
        if any(o.op in _OP_STATES for o in ops):
            return None
        checks = [o for o in ops if o.op == "check"]
        last_check_at = max((o.at_ms for o in checks), default=0) / 1000
        prepared_at = record.store_timestamp / 1000
        entry = _Pending(
            message_id=message_id,
            transaction_id=properties.get(props.TRANSACTION_ID, ""),
            producer_group=properties.get(props.PRODUCER_GROUP, ""),
            topic=properties[props.REAL_TOPIC],
            queue_id=int(properties.get(props.REAL_QUEUE_ID, "0")),
            half_offset=record.physical_offset,
            half_queue_offset=queue_offset,
            prepared_at=prepared_at,
            next_check_at=(last_check_at + self._interval)
            if checks
            else prepared_at + self._timeout,
            checks=max((o.checks for o in checks), default=0),
            last_check_at=last_check_at,
        )
        if self._committed_copy_exists(record, entry.topic):
            op = self._op(entry, "commit", self._clock(), "recovery", "committed copy found")
            self._remember(_status_from_op(op), [])
            return op
        self._pending[message_id] = entry
        return None

    def _committed_copy_exists(self, half: StoredMessage, topic: str) -> bool:
        return any(
            copy.topic == topic
            and copy.flags & TX_MASK == TX_COMMIT
            and copy.prepared_transaction_offset == half.physical_offset
            for copy in self._store.query_by_id(half.message_id, 16)
        )

    def persist(self, *, force: bool = False, sink: Sink | None = None) -> None:
        """Save the half-topic floor (at most once a second unless forced): below it every
        half message has an outcome that is flushed to disk."""
        now = self._clock()
        if not force and now - self._persisted_at < 1.0:
            return
        self._persisted_at = now
        flushed = self._store.statistics().flushed_position
        self._unflushed = [(q, end) for q, end in self._unflushed if end > flushed]
        candidates = [e.half_queue_offset for e in self._pending.values()]
        candidates += [q for q, _ in self._unflushed]
        floor = min(candidates, default=self._store.max_offset(HALF_TOPIC, 0))
        if floor > self._floor:
            self._floor = floor
            save_json(self._path, _Progress(half_floor=floor), sink)

    # -- producers ------------------------------------------------------------------------

    def heartbeat(
        self, client_id: str, groups: Sequence[str], channel: CheckChannel, owner: object
    ) -> None:
        """A producer of ``groups`` is live: transactions that waited for one are checked now."""
        now = self._clock()
        self.producers.heartbeat(client_id, groups, channel, now, owner)
        waiting = [
            e for e in self._pending.values() if e.waiting_since and e.producer_group in groups
        ]
        for entry in waiting:
            entry.next_check_at = min(entry.next_check_at, now)
        if waiting and self._wake is not None:
            self._wake.set()

    # -- history --------------------------------------------------------------------------

    def _record(
        self, entry: _Pending, outcome: str, *, attempt: int, consumer: str = "", error: str = ""
    ) -> None:
        self._history.record(
            message_id=entry.message_id,
            group=entry.producer_group,
            topic=entry.topic,
            attempt=attempt,
            outcome=outcome,
            consumer=consumer,
            error=error,
        )


def _status_from_op(op: _Op) -> TransactionStatus:
    return TransactionStatus(
        message_id=op.message_id,
        transaction_id=op.transaction_id,
        producer_group=op.producer_group,
        topic=op.topic,
        queue_id=op.queue_id,
        state=_OP_STATES.get(op.op, TransactionState.PREPARED),
        checks=op.checks,
        prepared_at=op.prepared_at_ms / 1000,
        updated_at=op.at_ms / 1000,
        source=op.source,
        detail=op.detail,
    )


def _check_view(half: StoredMessage, entry: _Pending, number: int) -> Delivered:
    """The half message as the producer's checker sees it: its real topic and queue."""
    properties = {k: v for k, v in half.properties.items() if k not in _INTERNAL_PROPERTIES}
    properties[props.CHECK_TIMES] = str(number)
    return Delivered(
        topic=entry.topic,
        queue_id=entry.queue_id,
        queue_offset=-1,
        body=half.body,
        properties=properties,
        born_timestamp=half.born_timestamp,
        store_timestamp=half.store_timestamp,
        physical_offset=half.physical_offset,
        delivery_attempt=number,
        born_host=half.born_host,
    )
