"""The protocol-agnostic broker core: topics, groups, send, pull, pop/ack, offsets, membership.

Both the native TCP server and the gRPC adapter drive a :class:`Broker`; neither reaches into the
store directly. The values they trade with it live in :mod:`pocketmq.model`.
"""

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import DEFAULT_DELAY_LEVELS, BrokerConfig
from pocketmq.broker.history import Outcome
from pocketmq.broker.resets import QueueReset, ResetTarget
from pocketmq.broker.topics import TopicConfig, TopicType, dlq_topic, retry_topic
from pocketmq.model import (  # the values it trades, re-exported for callers of this face
    Attempt,
    ClientInfo,
    ConsumeFrom,
    Delivered,
    EndOutcome,
    GroupConfig,
    InboundMessage,
    PullOutcome,
    PullStatus,
    RetryPolicy,
    SendBatch,
    SendOutcome,
    TransactionCheck,
    TransactionState,
    TransactionStatus,
)
from pocketmq.version import VERSION

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "VERSION",
    "Attempt",
    "Broker",
    "BrokerConfig",
    "ClientInfo",
    "ConsumeFrom",
    "Delivered",
    "EndOutcome",
    "GroupConfig",
    "InboundMessage",
    "Outcome",
    "PullOutcome",
    "PullStatus",
    "QueueReset",
    "ResetTarget",
    "RetryPolicy",
    "SendBatch",
    "SendOutcome",
    "TopicConfig",
    "TopicType",
    "TransactionCheck",
    "TransactionState",
    "TransactionStatus",
    "dlq_topic",
    "retry_topic",
]
