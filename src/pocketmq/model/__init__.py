"""The values every layer trades: messages, send and pull outcomes, delivery attempts, consumer
groups, clients, transactions (docs/design.md, "Layers").

Pure values, no I/O and no import above :mod:`pocketmq.errors`: the broker keeps them, each protocol
adapter and the proxy hand them over, and the native protocol carries the message values as they
are (they are MessagePack arrays), so nothing is copied between twin types on the way.
"""

from pocketmq.model.attempts import Attempt
from pocketmq.model.clients import ClientInfo
from pocketmq.model.groups import ConsumeFrom, GroupConfig, RetryPolicy
from pocketmq.model.messages import (
    Delivered,
    InboundMessage,
    PullOutcome,
    PullStatus,
    SendBatch,
    SendOutcome,
)
from pocketmq.model.transactions import (
    EndOutcome,
    TransactionCheck,
    TransactionState,
    TransactionStatus,
)

__all__ = [
    "Attempt",
    "ClientInfo",
    "ConsumeFrom",
    "Delivered",
    "EndOutcome",
    "GroupConfig",
    "InboundMessage",
    "PullOutcome",
    "PullStatus",
    "RetryPolicy",
    "SendBatch",
    "SendOutcome",
    "TransactionCheck",
    "TransactionState",
    "TransactionStatus",
]
