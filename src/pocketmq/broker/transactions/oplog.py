"""The op log: every transaction outcome and every check-back, as records in ``%SYS%TRANS_OP``.

The outcome of a transaction is a record keyed by its message id, so it survives restarts and
can be looked up with the index; a check is a record too, so a restart knows how often a
transaction was checked and when (docs/transactions.md §3).
"""

from __future__ import annotations

import logging

import msgspec

from pocketmq import properties as props
from pocketmq.broker.transactions.model import (
    OP_TOPIC,
    TX_COMMIT,
    TX_ROLLBACK,
    Pending,
)
from pocketmq.model.transactions import TransactionState, TransactionStatus
from pocketmq.store import MessageStore, StoreMessage

__all__ = ["OP_STATES", "Op", "OpLog", "make_op", "op_message", "status_from_op"]

log = logging.getLogger("pocketmq.broker")

_OP_LOOKUP_LIMIT = 256


class Op(msgspec.Struct, frozen=True, array_like=True):
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


OP_STATES = {
    "commit": TransactionState.COMMITTED,
    "rollback": TransactionState.ROLLED_BACK,
    "discard": TransactionState.DISCARDED,
}
_OP_FLAGS = {"commit": TX_COMMIT, "rollback": TX_ROLLBACK, "discard": TX_ROLLBACK, "check": 0}
encode_op = msgspec.msgpack.Encoder().encode
decode_op = msgspec.msgpack.Decoder(Op).decode


def make_op(entry: Pending, kind: str, now: float, source: str, detail: str = "") -> Op:
    """The op record of ``kind`` (commit, rollback, discard, check) for ``entry``."""
    return Op(
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


def op_message(op: Op) -> StoreMessage:
    """The store record of ``op``: keyed by the message id, flagged with the outcome."""
    return StoreMessage(
        topic=OP_TOPIC,
        queue_id=0,
        body=encode_op(op),
        properties={props.KEYS: op.message_id},
        flags=_OP_FLAGS[op.op],
        prepared_transaction_offset=op.half_offset,
    )


class OpLog:
    """Looks up a transaction's op records by message id (the store's key index)."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store

    def ops(self, message_id: str, half_offset: int | None = None) -> list[Op]:
        """Every op-log record of ``message_id`` (of one half message when ``half_offset`` is
        given), from the store's index; an undecodable record is logged and skipped."""
        found: list[Op] = []
        for record in self._store.query_by_key(OP_TOPIC, message_id, _OP_LOOKUP_LIMIT):
            try:
                op = decode_op(record.body)
            except msgspec.DecodeError:
                log.error("op-log record at %d does not decode; ignored", record.physical_offset)
                continue
            if op.message_id == message_id and (
                half_offset is None or op.half_offset == half_offset
            ):
                found.append(op)
        return sorted(found, key=lambda o: o.at_ms)

    def final(self, message_id: str, half_offset: int | None = None) -> Op | None:
        """The record that ended the transaction, or None while it is pending: what a restart and a
        late request are judged by."""
        return next((o for o in self.ops(message_id, half_offset) if o.op in OP_STATES), None)


def status_from_op(op: Op) -> TransactionStatus:
    """A transaction's status as the op-log record describes it (for queries after the pending entry
    is gone)."""
    return TransactionStatus(
        message_id=op.message_id,
        transaction_id=op.transaction_id,
        producer_group=op.producer_group,
        topic=op.topic,
        queue_id=op.queue_id,
        state=OP_STATES.get(op.op, TransactionState.PREPARED),
        checks=op.checks,
        prepared_at=op.prepared_at_ms / 1000,
        updated_at=op.at_ms / 1000,
        source=op.source,
        detail=op.detail,
    )
