"""Transactional messages: half messages, commit or rollback, and check-back.

The package's modules: ``model`` (the pending record and the internal topics; the states the
adapters see are in :mod:`pocketmq.model.transactions`), ``oplog`` (the outcome records),
``service`` (prepare and end), ``checker`` (check-back), ``recovery`` (after a restart).
"""

from pocketmq.broker.transactions.model import (
    HALF_TOPIC,
    OP_TOPIC,
    TX_COMMIT,
    TX_MASK,
    TX_PREPARED,
    TX_ROLLBACK,
)
from pocketmq.broker.transactions.service import TransactionService

__all__ = [
    "HALF_TOPIC",
    "OP_TOPIC",
    "TX_COMMIT",
    "TX_MASK",
    "TX_PREPARED",
    "TX_ROLLBACK",
    "TransactionService",
]
