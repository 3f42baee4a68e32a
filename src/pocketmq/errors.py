"""Every error pocketmq raises, as one tree with one root.

Why one module: callers catch by meaning (``except TooManyRequestsError``), retry loops ask one
question (``error.retriable``), and the wire layer turns a response code into the right class
through :data:`ERROR_BY_CODE` without knowing the classes by name. Every layer may import this
module; it imports nothing from pocketmq.

::

    PocketMQError
    ├── ClientError                     the SDK's own state refuses the call, never sent
    │   ├── ClosedError
    │   └── QueueFullError              a bounded queue overflowed (carries the counts)
    ├── InvalidArgumentError            an argument refused, by the SDK or by the broker
    │   └── MessageIllegalError         ... when the broker refused it (also a BrokerError)
    ├── ProtocolError                   a frame or body could not be understood
    │   ├── LocalProtocolError          found here: what we received (or would send) is bad
    │   └── RemoteProtocolError         the broker could not read ours (also a BrokerError)
    ├── BrokerConnectionError           retriable: could not reach / lost the broker
    │   ├── RequestTimeoutError         retriable: no answer in time
    │   └── ServerIdentityError         the server did not prove it knows our secret
    ├── SendOutcomeUnknownError         the message may or may not be stored
    ├── BrokerError                     the broker answered with an error code
    │   ├── RemoteProtocolError         malformed or oversize frame (code PROTOCOL_ERROR)
    │   ├── BrokerInternalError                broker-side bug or I/O failure (retriable)
    │   ├── ServiceUnavailableError     broker shutting down / not ready (retriable)
    │   │   └── NoMasterError           the topic's groups have no master now (retriable)
    │   ├── TooManyRequestsError        flow control, code 530 (retriable with backoff)
    │   ├── FlushDiskTimeoutError       stored but not yet durable (retriable)
    │   ├── StorageFullError            the disk is full (retriable)
    │   ├── StorageFailedError          an I/O error stopped the broker's writes (retriable)
    │   ├── MessageIllegalError         the broker refused an argument (an InvalidArgumentError)
    │   │   └── MessageTooLargeError
    │   ├── TopicNotFoundError
    │   ├── GroupNotFoundError
    │   ├── NoPermissionError
    │   ├── InvalidReceiptHandleError
    │   ├── MessageNotFoundError
    │   ├── TransactionStateError
    │   ├── PreconditionFailedError     the broker's state forbids it now (promotion)
    │   └── UnsupportedError
    └── StoreError
        └── StoreCorruptedError         a record before the last checkpoint fails its CRC

Two classes sit on two branches, so that one ``except`` answers one question. A refused
argument is an :class:`InvalidArgumentError` whether the SDK caught it before sending or the
broker answered ``MESSAGE_ILLEGAL`` (then it is a :class:`MessageIllegalError` too, with the
broker's code and remark). A protocol error is a :class:`ProtocolError` wherever it was found,
but only the broker's answer (:class:`RemoteProtocolError`) is a :class:`BrokerError`; a frame
or body this process cannot decode is a :class:`LocalProtocolError` (docs/protocol.md,
"Errors").
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar, Final

__all__ = [
    "ERROR_BY_CODE",
    "STORED_CODES",
    "BrokerConnectionError",
    "BrokerError",
    "BrokerInternalError",
    "ClientError",
    "ClosedError",
    "Code",
    "FlushDiskTimeoutError",
    "GroupNotFoundError",
    "InvalidArgumentError",
    "InvalidReceiptHandleError",
    "LocalProtocolError",
    "MessageIllegalError",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "NoMasterError",
    "NoPermissionError",
    "PocketMQError",
    "PreconditionFailedError",
    "ProtocolError",
    "QueueFullError",
    "RemoteProtocolError",
    "RequestTimeoutError",
    "SendOutcomeUnknownError",
    "ServerIdentityError",
    "ServiceUnavailableError",
    "StorageFailedError",
    "StorageFullError",
    "StoreCorruptedError",
    "StoreError",
    "TooManyRequestsError",
    "TopicNotFoundError",
    "TransactionStateError",
    "UnsupportedError",
    "error_from_code",
]


class Code(IntEnum):
    """Response codes of the native protocol (numbers follow RocketMQ where it has one)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    MESSAGE_TOO_LARGE = 18
    NO_MESSAGE = 19
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    STORAGE_FULL = 27
    PROTOCOL_ERROR = 40
    INVALID_RECEIPT_HANDLE = 41
    MESSAGE_NOT_FOUND = 42
    TRANSACTION_STATE = 43
    STORAGE_FAILED = 44
    PRECONDITION_FAILED = 45
    NO_MASTER = 46
    TOO_MANY_REQUESTS = 530


STORED_CODES: Final = frozenset(
    {Code.SUCCESS, Code.FLUSH_DISK_TIMEOUT, Code.SLAVE_NOT_AVAILABLE, Code.FLUSH_SLAVE_TIMEOUT}
)
"""Send result codes meaning "stored" (the last three with a weaker guarantee: not yet known
durable on the master's disk, or not on a slave; docs/replication.md §3)."""


class PocketMQError(Exception):
    """Root of every pocketmq error. ``retriable`` says whether repeating the call may succeed."""

    retriable: ClassVar[bool] = False


class ClientError(PocketMQError):
    """The caller used a client in a state that refuses the call; nothing was sent."""


class InvalidArgumentError(PocketMQError, ValueError):
    """An argument has the wrong type or value: found by the SDK before anything was sent, or
    by the broker (then the exception is a :class:`MessageIllegalError` as well), so one
    ``except InvalidArgumentError`` covers a mistake wherever it was caught."""


class ClosedError(ClientError):
    """The resource was closed (or never started)."""


class QueueFullError(ClientError):
    """A bounded queue is full; carries how full it is."""

    def __init__(self, what: str, size: int, capacity: int) -> None:
        super().__init__(f"{what} is full ({size} of {capacity})")
        self.what = what
        self.size = size
        self.capacity = capacity


class BrokerConnectionError(PocketMQError):
    """Could not reach the broker, or the connection broke mid-request."""

    retriable = True

    def __init__(self, message: str, *, address: str = "") -> None:
        super().__init__(message)
        self.address = address


class RequestTimeoutError(BrokerConnectionError):
    """The broker did not answer within the timeout."""


class ServerIdentityError(BrokerConnectionError):
    """The server did not prove it knows this client's secret although the client holds
    credentials: it asked for no authentication, or its proof was wrong — not the server the
    client meant (a relay, a rogue). Retried elsewhere like an unreachable broker
    (docs/security.md, "The native handshake")."""


class SendOutcomeUnknownError(PocketMQError):
    """A send timed out or its connection broke after the request left: the message may be stored.

    The message id is stable, so a consumer can deduplicate if the caller sends again.
    """

    def __init__(
        self, message: str, *, message_id: str, cause: BaseException | None = None
    ) -> None:
        super().__init__(message)
        self.message_id = message_id
        self.__cause__ = cause


class BrokerError(PocketMQError):
    """The broker answered with an error. ``code`` is the wire code, ``remark`` its text."""

    code: ClassVar[Code] = Code.SYSTEM_ERROR

    def __init__(self, remark: str = "", *, code: int | None = None) -> None:
        super().__init__(remark or self.__class__.__name__)
        self.remark = remark
        if code is not None:
            self.wire_code = code
        else:
            self.wire_code = int(self.code)


class ProtocolError(PocketMQError):
    """A frame or body was malformed, too large, or of an unknown kind. Which side found it is
    the subclass; ``wire_code`` is the code a server answers it with."""

    code: ClassVar[Code] = Code.PROTOCOL_ERROR
    wire_code: int = Code.PROTOCOL_ERROR


class LocalProtocolError(ProtocolError):
    """This process cannot decode what it received, or refuses to encode what it was asked to
    send (too large); the connection's framing is lost and it is closed. Not an answer from
    the broker."""


class RemoteProtocolError(ProtocolError, BrokerError):
    """The broker answered ``PROTOCOL_ERROR``: it could not read what this client sent."""


class BrokerInternalError(BrokerError):
    """The broker failed internally (I/O error, bug)."""

    code = Code.SYSTEM_ERROR
    retriable = True


class ServiceUnavailableError(BrokerError):
    """The broker is starting, stopping, or cannot serve this request now."""

    code = Code.SERVICE_NOT_AVAILABLE
    retriable = True


class NoMasterError(ServiceUnavailableError):
    """No broker group holding the topic has a master right now: a failover is under way (or
    the master is fenced), so nothing can be written until one is elected or promoted
    (docs/replication.md §5, §9). Retriable: the SDK keeps asking for the route until its
    ``send_timeout``; retrying later succeeds once the group has a master again."""

    code = Code.NO_MASTER


class TooManyRequestsError(BrokerError):
    """Flow control (code 530): back off exponentially, then retry."""

    code = Code.TOO_MANY_REQUESTS
    retriable = True


class FlushDiskTimeoutError(BrokerError):
    """The message was written but not made durable in time (sync flush)."""

    code = Code.FLUSH_DISK_TIMEOUT
    retriable = True


class StorageFullError(BrokerError):
    """The broker's disk is full; nothing was stored."""

    code = Code.STORAGE_FULL
    retriable = True


class StorageFailedError(BrokerError):
    """An fsync or write failed on the broker: it stopped accepting writes until restarted.

    A message answered with this code *may or may not* be stored (it was written before the
    failure was found), so the producer treats the outcome as unknown and sends it elsewhere with
    the same message id; deduplicating consumers see it once.
    """

    code = Code.STORAGE_FAILED
    retriable = True


class MessageIllegalError(BrokerError, InvalidArgumentError):
    """The broker refused the message or an argument (empty body, bad topic name, bad property).

    ``rule`` names the rule of the send contract it broke (:class:`pocketmq.contract.Rule`
    value, "" when not known), so an adapter can answer with its protocol's own code.
    """

    code = Code.MESSAGE_ILLEGAL

    def __init__(self, remark: str = "", *, code: int | None = None, rule: str = "") -> None:
        super().__init__(remark, code=code)
        self.rule = rule


class MessageTooLargeError(MessageIllegalError):
    """The message exceeds the broker's size limit."""

    code = Code.MESSAGE_TOO_LARGE


class TopicNotFoundError(BrokerError):
    """The topic does not exist (create it with ``pocketmq topic create``)."""

    code = Code.TOPIC_NOT_EXIST


class GroupNotFoundError(BrokerError):
    """The consumer group does not exist (create it with ``pocketmq group create``)."""

    code = Code.SUBSCRIPTION_GROUP_NOT_EXIST


class NoPermissionError(BrokerError):
    """The topic or broker does not allow this operation (read or write permission)."""

    code = Code.NO_PERMISSION


class InvalidReceiptHandleError(BrokerError):
    """The receipt handle is unknown, stale (redelivered since), or already acknowledged."""

    code = Code.INVALID_RECEIPT_HANDLE


class MessageNotFoundError(BrokerError):
    """No message matches the id, key or offset."""

    code = Code.MESSAGE_NOT_FOUND


class TransactionStateError(BrokerError):
    """The transaction already ended differently (e.g. commit after rollback)."""

    code = Code.TRANSACTION_STATE


class UnsupportedError(BrokerError):
    """The broker does not support this request."""

    code = Code.REQUEST_CODE_NOT_SUPPORTED


class PreconditionFailedError(BrokerError):
    """The broker's state forbids the request now (a slave not known to be in sync refuses a
    promotion); the text says what would allow it."""

    code = Code.PRECONDITION_FAILED


class StoreError(PocketMQError):
    """The message store cannot continue."""


class StoreCorruptedError(StoreError):
    """Data the store had already confirmed durable fails verification; an operator must decide."""

    def __init__(self, message: str, *, path: str, offset: int) -> None:
        super().__init__(f"{message} ({path} at offset {offset})")
        self.path = path
        self.offset = offset


ERROR_BY_CODE: Final[dict[int, type[BrokerError]]] = {
    int(cls.code): cls
    for cls in (
        RemoteProtocolError,
        BrokerInternalError,
        ServiceUnavailableError,
        NoMasterError,
        TooManyRequestsError,
        FlushDiskTimeoutError,
        StorageFullError,
        StorageFailedError,
        MessageIllegalError,
        MessageTooLargeError,
        TopicNotFoundError,
        GroupNotFoundError,
        NoPermissionError,
        InvalidReceiptHandleError,
        MessageNotFoundError,
        TransactionStateError,
        UnsupportedError,
        PreconditionFailedError,
    )
}
ERROR_BY_CODE[int(Code.SYSTEM_BUSY)] = TooManyRequestsError


def error_from_code(code: int, remark: str) -> BrokerError:
    """The exception for a wire response code (unknown codes become :class:`BrokerError`)."""
    cls = ERROR_BY_CODE.get(code, BrokerError)
    return cls(remark, code=code)
