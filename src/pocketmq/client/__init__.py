"""The asyncio SDK: producers, consumers and administration over the native protocol."""

from pocketmq.client.admin import (
    Admin,
    DeadLetter,
    GroupInfo,
    QueueInfo,
    TopicInfo,
    TransactionInfo,
)
from pocketmq.client.backoff import Backoff
from pocketmq.client.config import ClientConfig
from pocketmq.client.message import ConsumeStatus, Message, MessageView, SendResult, SendStatus
from pocketmq.client.producer import Producer, ProducerConfig, ProducerStatistics
from pocketmq.client.push import (
    ConsumeContext,
    ConsumerStatistics,
    MessageModel,
    PushConsumer,
    PushConsumerConfig,
)
from pocketmq.client.simple import SimpleConsumer
from pocketmq.client.transaction import (
    LocalTransaction,
    TransactionChecker,
    TransactionProducer,
    TransactionResolution,
    TransactionResult,
    TransactionStatistics,
)

__all__ = [
    "Admin",
    "Backoff",
    "ClientConfig",
    "ConsumeContext",
    "ConsumeStatus",
    "ConsumerStatistics",
    "DeadLetter",
    "GroupInfo",
    "LocalTransaction",
    "Message",
    "MessageModel",
    "MessageView",
    "Producer",
    "ProducerConfig",
    "ProducerStatistics",
    "PushConsumer",
    "PushConsumerConfig",
    "QueueInfo",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TopicInfo",
    "TransactionChecker",
    "TransactionInfo",
    "TransactionProducer",
    "TransactionResolution",
    "TransactionResult",
    "TransactionStatistics",
]
