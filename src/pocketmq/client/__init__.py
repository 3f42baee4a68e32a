"""The asyncio SDK: producers, consumers and administration over the native protocol.

The names are loaded on first use (PEP 562): a program that needs only the producer, such as
``pocketmq send``, does not pay for importing the consumers and the admin client
(docs/benchmarks.md, "CLI start-up").
"""

import typing

from pocketmq.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from pocketmq.client.admin import Admin
    from pocketmq.client.admin_types import (
        BrokerInfo,
        BrokerStatus,
        DeadLetter,
        DeliveryAttempt,
        GroupInfo,
        OffsetMove,
        Promotion,
        QueueInfo,
        RedriveItem,
        RedriveReport,
        StoredMessage,
        TopicChange,
        TopicInfo,
        TransactionInfo,
    )
    from pocketmq.client.backoff import Backoff
    from pocketmq.client.config import ClientConfig
    from pocketmq.client.consumer.config import (
        ConsumeContext,
        ConsumerStatistics,
        MessageModel,
        PushConsumerConfig,
    )
    from pocketmq.client.consumer.push import PushConsumer
    from pocketmq.client.consumer.simple import SimpleConsumer
    from pocketmq.client.message import ConsumeStatus, Message, MessageView, SendResult, SendStatus
    from pocketmq.client.producer import Producer, ProducerConfig, ProducerStatistics
    from pocketmq.client.producer.outcomes import (
        LocalTransaction,
        TransactionChecker,
        TransactionResolution,
        TransactionResult,
        TransactionStatistics,
    )
    from pocketmq.client.producer.transaction import TransactionProducer

__all__ = [
    "Admin",
    "Backoff",
    "BrokerInfo",
    "BrokerStatus",
    "ClientConfig",
    "ConsumeContext",
    "ConsumeStatus",
    "ConsumerStatistics",
    "DeadLetter",
    "DeliveryAttempt",
    "GroupInfo",
    "LocalTransaction",
    "Message",
    "MessageModel",
    "MessageView",
    "OffsetMove",
    "Producer",
    "ProducerConfig",
    "ProducerStatistics",
    "Promotion",
    "PushConsumer",
    "PushConsumerConfig",
    "QueueInfo",
    "RedriveItem",
    "RedriveReport",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "StoredMessage",
    "TopicChange",
    "TopicInfo",
    "TransactionChecker",
    "TransactionInfo",
    "TransactionProducer",
    "TransactionResolution",
    "TransactionResult",
    "TransactionStatistics",
]

_MODULES = {
    "Admin": "admin",
    "BrokerInfo": "admin_types",
    "BrokerStatus": "admin_types",
    "DeadLetter": "admin_types",
    "DeliveryAttempt": "admin_types",
    "GroupInfo": "admin_types",
    "OffsetMove": "admin_types",
    "Promotion": "admin_types",
    "QueueInfo": "admin_types",
    "RedriveItem": "admin_types",
    "RedriveReport": "admin_types",
    "StoredMessage": "admin_types",
    "TopicChange": "admin_types",
    "TopicInfo": "admin_types",
    "TransactionInfo": "admin_types",
    "Backoff": "backoff",
    "ClientConfig": "config",
    "ConsumeStatus": "message",
    "Message": "message",
    "MessageView": "message",
    "SendResult": "message",
    "SendStatus": "message",
    "Producer": "producer",
    "ProducerConfig": "producer",
    "ProducerStatistics": "producer",
    "ConsumeContext": "consumer.config",
    "ConsumerStatistics": "consumer.config",
    "MessageModel": "consumer.config",
    "PushConsumerConfig": "consumer.config",
    "PushConsumer": "consumer.push",
    "SimpleConsumer": "consumer.simple",
    "LocalTransaction": "producer.outcomes",
    "TransactionChecker": "producer.outcomes",
    "TransactionResolution": "producer.outcomes",
    "TransactionResult": "producer.outcomes",
    "TransactionStatistics": "producer.outcomes",
    "TransactionProducer": "producer.transaction",
}


__getattr__, __dir__ = _lazy_exports(__name__, _MODULES, globals(), __all__)
