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
from pocketmq.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from pocketmq.client.message import (
        ConsumeStatus,
        Message,
        MessageView,
        SendResult,
        SendStatus,
    )

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

# The message types are loaded on first use: importing ``pocketmq`` (or any of its subpackages,
# such as the CLI) does not import the SDK (docs/benchmarks.md, "CLI start-up").
_MODULES = {
    "ConsumeStatus": "client.message",
    "Message": "client.message",
    "MessageView": "client.message",
    "SendResult": "client.message",
    "SendStatus": "client.message",
}
__getattr__, __dir__ = _lazy_exports(__name__, _MODULES, globals(), __all__)
