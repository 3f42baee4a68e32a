"""pocketmq: a reliable messaging system in Python, modelled on Apache RocketMQ.

The names below are the whole public surface of the top-level package; everything else lives in
private modules or in the subpackages named in the docs (``pocketmq.store``, ``pocketmq.testing``,
``pocketmq.reliability``, ``pocketmq.pipeline``).
"""

import typing

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

if typing.TYPE_CHECKING:
    from pocketmq.client import ConsumeStatus, Message, MessageView, SendResult, SendStatus

from pocketmq.version import VERSION as __version__

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

_FROM_CLIENT = frozenset({"ConsumeStatus", "Message", "MessageView", "SendResult", "SendStatus"})


def __getattr__(name: str) -> object:
    """The message types are loaded on first use: importing ``pocketmq`` (or any of its
    subpackages, such as the CLI) does not import the SDK (docs/benchmarks.md, "CLI start-up")."""
    if name not in _FROM_CLIENT:
        raise AttributeError(f"module 'pocketmq' has no attribute {name!r}")
    from pocketmq.client import message

    value = getattr(message, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
