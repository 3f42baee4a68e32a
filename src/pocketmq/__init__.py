"""pocketmq: a reliable messaging system in Python, modelled on Apache RocketMQ.

The names below are the whole public surface of the top-level package; everything else lives in
private modules or in the subpackages named in the docs (``pocketmq.store``, ``pocketmq.testing``,
``pocketmq.reliability``, ``pocketmq.pipeline``).
"""

from pocketmq.client import ConsumeStatus, Message, MessageView, SendResult, SendStatus
from pocketmq.errors import (
    BrokerConnectionError,
    BrokerError,
    ClientError,
    ClosedError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    MessageIllegalError,
    MessageTooLargeError,
    PocketMQError,
    RequestTimeoutError,
    SendOutcomeUnknownError,
    TooManyRequestsError,
    TopicNotFoundError,
)

__version__ = "0.1.0"

__all__ = [
    "BrokerConnectionError",
    "BrokerError",
    "ClientError",
    "ClosedError",
    "ConsumeStatus",
    "GroupNotFoundError",
    "InvalidArgumentError",
    "InvalidReceiptHandleError",
    "Message",
    "MessageIllegalError",
    "MessageTooLargeError",
    "MessageView",
    "PocketMQError",
    "RequestTimeoutError",
    "SendOutcomeUnknownError",
    "SendResult",
    "SendStatus",
    "TooManyRequestsError",
    "TopicNotFoundError",
    "__version__",
]
