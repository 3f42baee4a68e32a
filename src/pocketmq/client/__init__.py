"""The asyncio SDK: producers, consumers and administration over the native protocol.

The names are loaded on first use (PEP 562): a program that needs only the producer, such as
``pocketmq send``, does not pay for importing the consumers and the admin client
(docs/benchmarks.md, "CLI start-up").
"""

import typing

if typing.TYPE_CHECKING:
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

_MODULES = {
    "Admin": "admin",
    "DeadLetter": "admin",
    "GroupInfo": "admin",
    "QueueInfo": "admin",
    "TopicInfo": "admin",
    "TransactionInfo": "admin",
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
    "ConsumeContext": "push",
    "ConsumerStatistics": "push",
    "MessageModel": "push",
    "PushConsumer": "push",
    "PushConsumerConfig": "push",
    "SimpleConsumer": "simple",
    "LocalTransaction": "transaction",
    "TransactionChecker": "transaction",
    "TransactionProducer": "transaction",
    "TransactionResolution": "transaction",
    "TransactionResult": "transaction",
    "TransactionStatistics": "transaction",
}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'pocketmq.client' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"pocketmq.client.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
