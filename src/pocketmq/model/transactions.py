"""A transaction's states and what the broker reports about one (docs/transactions.md): values
the broker keeps and every protocol adapter answers with."""

from __future__ import annotations

import enum

import msgspec

from pocketmq.model.messages import Delivered

__all__ = ["EndOutcome", "TransactionCheck", "TransactionState", "TransactionStatus"]


class TransactionState(enum.Enum):
    """Where a transaction is (docs/transactions.md, "2. The state machine"): prepared, or one of
    the final states."""

    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"

    @property
    def final(self) -> bool:
        """Whether the transaction has ended: a final state never changes again."""
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
    """The answer to an end-transaction request; ``duplicate`` makes a retried end harmless instead
    of an error."""

    status: TransactionStatus
    duplicate: bool = False  # the transaction had already ended this way: nothing changed


class TransactionCheck(msgspec.Struct, frozen=True):
    """A check-back the broker asks a producer: what became of this local transaction?"""

    producer_group: str
    transaction_id: str
    check_number: int
    message: Delivered
