"""Recovery: the pending transactions after a restart, from the half topic and the op log.

Pending transactions are the half messages (from the saved floor on) without an outcome in the
op log, each with its check count and last check time from its check records. A half message
without an outcome whose committed copy exists (a crash between the copy and its op record) is
recorded as committed instead of being checked and committed again (docs/transactions.md §3).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pocketmq import properties as props
from pocketmq.broker.transactions.model import HALF_TOPIC, TX_COMMIT, TX_MASK, Pending
from pocketmq.broker.transactions.oplog import OP_STATES, Op, make_op, op_message, status_from_op
from pocketmq.store import StoredMessage, StoreMessage

if TYPE_CHECKING:
    from pocketmq.broker.transactions.service import TransactionService

__all__ = ["rebuild"]

log = logging.getLogger("pocketmq.broker")


def rebuild(service: TransactionService) -> None:
    """Fill ``service.pending`` from the store; record the commits found complete."""
    _Rebuild(service).run()


class _Rebuild:
    def __init__(self, service: TransactionService) -> None:
        self._service = service

    def run(self) -> None:
        """Pending transactions = half messages (from the saved floor) without an outcome."""
        offset = max(self._service.floor, self._service.store.min_offset(HALF_TOPIC, 0))
        recovered: list[StoreMessage] = []
        while True:
            entries = self._service.store.read_queue(HALF_TOPIC, 0, offset, 1024)
            if not entries:
                break
            for queue_entry in entries:
                record = self._service.store.read_message(queue_entry.physical_offset)
                if record is not None:
                    op = self._recover(record, queue_entry.queue_offset)
                    if op is not None:
                        recovered.append(op_message(op))
            offset = entries[-1].queue_offset + 1
        if recovered:
            self._service.append(recovered)
        if self._service.pending or recovered:
            log.info(
                "transactions: %d pending after restart, %d commits recovered from their copies",
                len(self._service.pending),
                len(recovered),
            )

    def _recover(self, record: StoredMessage, queue_offset: int) -> Op | None:
        message_id = record.message_id
        properties = record.properties
        if message_id in self._service.pending or props.REAL_TOPIC not in properties:
            return None
        ops = self._service.oplog.ops(message_id, record.physical_offset)
        if any(o.op in OP_STATES for o in ops):
            return None
        checks = [o for o in ops if o.op == "check"]
        last_check_at = max((o.at_ms for o in checks), default=0) / 1000
        prepared_at = record.store_timestamp / 1000
        entry = Pending(
            message_id=message_id,
            transaction_id=properties.get(props.TRANSACTION_ID, ""),
            producer_group=properties.get(props.PRODUCER_GROUP, ""),
            topic=properties[props.REAL_TOPIC],
            queue_id=int(properties.get(props.REAL_QUEUE_ID, "0")),
            half_offset=record.physical_offset,
            half_queue_offset=queue_offset,
            prepared_at=prepared_at,
            next_check_at=(last_check_at + self._service.interval)
            if checks
            else prepared_at + self._service.timeout,
            checks=max((o.checks for o in checks), default=0),
            last_check_at=last_check_at,
        )
        if self._committed_copy_exists(record, entry.topic):
            op = make_op(entry, "commit", self._service.clock(), "recovery", "committed copy found")
            self._service.remember(status_from_op(op), [])
            return op
        self._service.pending[message_id] = entry
        return None

    def _committed_copy_exists(self, half: StoredMessage, topic: str) -> bool:
        return any(
            copy.topic == topic
            and copy.flags & TX_MASK == TX_COMMIT
            and copy.prepared_transaction_offset == half.physical_offset
            for copy in self._service.store.query_by_id(half.message_id, 16)
        )
