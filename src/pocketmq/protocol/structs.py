"""The bodies of native-protocol frames, one msgspec structure per request and response.

Structures are frozen and encoded as MessagePack arrays (``array_like``): compact, fast, and
validated on decode — a wrong type is a :class:`~pocketmq.errors.ProtocolError` naming the field,
never a half-built request. New fields go at the end with a default so older peers keep working.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from pocketmq.errors import ProtocolError
from pocketmq.protocol.codes import RequestCode

__all__ = [
    "REQUESTS",
    "RESPONSES",
    "AckEntry",
    "AckRequest",
    "AckResponse",
    "AttemptRecord",
    "BrokerAddress",
    "BrokerStatusResponse",
    "BrowseRequest",
    "ChangeInvisibleRequest",
    "ChangeInvisibleResponse",
    "CheckTransactionRequest",
    "CommitOffsetRequest",
    "ConsumerRegistration",
    "ConsumersChangedNotice",
    "DeliveredMessage",
    "Empty",
    "EndTransactionRequest",
    "EndTransactionResponse",
    "ErrorBody",
    "GetConsumersRequest",
    "GetConsumersResponse",
    "GetRouteRequest",
    "GroupSpec",
    "HeartbeatRequest",
    "HelloRequest",
    "HelloResponse",
    "ListBrokersResponse",
    "ListGroupsResponse",
    "ListTopicsResponse",
    "LockQueuesRequest",
    "LockQueuesResponse",
    "MessageHistoryRequest",
    "MessageHistoryResponse",
    "NameRequest",
    "OffsetEntry",
    "PopRequest",
    "PopResponse",
    "PromoteRequest",
    "PromoteResponse",
    "PullRequest",
    "PullResponse",
    "QueryMessageRequest",
    "QueryMessageResponse",
    "QueryOffsetRequest",
    "QueryOffsetResponse",
    "QueueRef",
    "QueueRoute",
    "QueueStatus",
    "QueueStatusRequest",
    "QueueStatusResponse",
    "RedriveItem",
    "RedriveRequest",
    "RedriveResponse",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "ReportOutcomesRequest",
    "RouteResponse",
    "SendBackRequest",
    "SendRequest",
    "SendResponse",
    "SendResultItem",
    "TopicSpec",
    "TransactionStateRequest",
    "TransactionStateResponse",
    "UnregisterRequest",
    "WireMessage",
    "decode_body",
    "encode_body",
]


class _Body(msgspec.Struct, frozen=True, array_like=True, gc=False):
    pass


class Empty(_Body, frozen=True):
    pass


class ErrorBody(_Body, frozen=True):
    remark: str = ""


# -- handshake and membership ---------------------------------------------------------------


class HelloRequest(_Body, frozen=True):
    protocol_version: int
    client_id: str
    client_version: str = ""
    language: str = "python"


class HelloResponse(_Body, frozen=True):
    protocol_version: int
    server_version: str
    server_name: str
    role: str  # "broker" | "namesrv"
    max_frame_body: int
    max_message_size: int
    # the server closes a connection idle this long (0: never); clients close theirs sooner
    idle_timeout_ms: int = 0


class ConsumerRegistration(_Body, frozen=True):
    group: str
    model: str  # "clustering" | "broadcasting"
    subscriptions: dict[str, str]  # topic -> filter expression


class HeartbeatRequest(_Body, frozen=True):
    client_id: str
    producer_groups: list[str] = []
    consumers: list[ConsumerRegistration] = []


class UnregisterRequest(_Body, frozen=True):
    client_id: str
    groups: list[str] = []


class GetConsumersRequest(_Body, frozen=True):
    group: str


class GetConsumersResponse(_Body, frozen=True):
    client_ids: list[str]


class ConsumersChangedNotice(_Body, frozen=True):
    group: str


# -- messages -------------------------------------------------------------------------------


class WireMessage(_Body, frozen=True):
    """A message as a producer sends it; id, tag, keys and hints are properties."""

    topic: str
    body: bytes
    properties: dict[str, str] = {}
    queue_id: int = -1
    flags: int = 0
    born_timestamp: int = 0


class DeliveredMessage(_Body, frozen=True):
    """A message as a consumer receives it."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    physical_offset: int
    delivery_attempt: int = 1
    receipt_handle: str = ""
    born_host: str = ""
    broker_name: str = ""


class SendRequest(_Body, frozen=True):
    messages: list[WireMessage]
    producer_group: str = ""


class SendResultItem(_Body, frozen=True):
    code: int
    remark: str = ""
    message_id: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    transaction_id: str = ""
    physical_offset: int = -1


class SendResponse(_Body, frozen=True):
    results: list[SendResultItem]
    broker_name: str = ""


class SendBackRequest(_Body, frozen=True):
    group: str
    physical_offset: int
    message_id: str
    delay_level: int = 0
    max_reconsume_times: int = -1
    origin_topic: str = ""
    error: str = ""
    consumer: str = ""
    outcome: str = "RECONSUME_LATER"
    delivered_at_ms: int = 0


class EndTransactionRequest(_Body, frozen=True):
    """Commit (``commit=True``) or roll back a half message; ``from_check`` marks the answer to
    a CHECK_TRANSACTION. ``topic``, when set, must be the half message's real topic."""

    producer_group: str
    message_id: str
    transaction_id: str
    commit: bool
    from_check: bool = False
    physical_offset: int = -1  # informational: the half message's offset from the send result
    topic: str = ""


class EndTransactionResponse(_Body, frozen=True):
    state: str  # COMMITTED | ROLLED_BACK | DISCARDED
    duplicate: bool = False  # it had already ended this way: nothing changed


class CheckTransactionRequest(_Body, frozen=True):
    """Broker → producer (one-way): what became of this transaction? The message carries its
    real topic and queue; its property ``TRANSACTION_CHECK_TIMES`` is this check's number."""

    producer_group: str
    transaction_id: str
    message: DeliveredMessage


class TransactionStateRequest(_Body, frozen=True):
    message_id: str


class TransactionStateResponse(_Body, frozen=True):
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    state: str  # PREPARED | COMMITTED | ROLLED_BACK | DISCARDED
    checks: int
    prepared_at_ms: int
    updated_at_ms: int
    source: str = ""  # who decided: client | check | broker | recovery
    detail: str = ""


# -- consumption ----------------------------------------------------------------------------


class PullRequest(_Body, frozen=True):
    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int = 32
    expression: str = "*"
    max_wait_ms: int = 0


class PullResponse(_Body, frozen=True):
    status: str  # FOUND | NO_NEW_MESSAGE | NO_MATCHED_MESSAGE | OFFSET_ILLEGAL
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[DeliveredMessage] = []


class PopRequest(_Body, frozen=True):
    group: str
    topic: str
    max_count: int = 32
    invisible_ms: int = 30_000
    max_wait_ms: int = 0
    expression: str = "*"
    queue_hint: int = -1
    consumer: str = ""
    attempt_id: str = ""


class PopResponse(_Body, frozen=True):
    messages: list[DeliveredMessage]


class AckEntry(_Body, frozen=True):
    topic: str
    receipt_handle: str


class AckRequest(_Body, frozen=True):
    group: str
    entries: list[AckEntry]
    consumer: str = ""


class AckResponse(_Body, frozen=True):
    codes: list[int]
    remarks: list[str] = []


class ChangeInvisibleRequest(_Body, frozen=True):
    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int
    error: str = ""
    consumer: str = ""


class ChangeInvisibleResponse(_Body, frozen=True):
    receipt_handle: str


class OffsetEntry(_Body, frozen=True):
    topic: str
    queue_id: int
    offset: int


class CommitOffsetRequest(_Body, frozen=True):
    group: str
    entries: list[OffsetEntry]


class QueueRef(_Body, frozen=True):
    topic: str
    queue_id: int


class LockQueuesRequest(_Body, frozen=True):
    group: str
    client_id: str
    queues: list[QueueRef]


class LockQueuesResponse(_Body, frozen=True):
    granted: list[QueueRef]


class QueryOffsetRequest(_Body, frozen=True):
    group: str
    topic: str
    queue_id: int


class QueryOffsetResponse(_Body, frozen=True):
    offset: int


# -- queries --------------------------------------------------------------------------------


class QueryMessageRequest(_Body, frozen=True):
    message_id: str = ""
    topic: str = ""
    key: str = ""
    max_count: int = 32
    skip: int = 0  # results already received (the next page starts after them)


class QueryMessageResponse(_Body, frozen=True):
    messages: list[DeliveredMessage]
    more: bool = False  # cut to fit a frame: ask again with skip += len(messages)


class MessageHistoryRequest(_Body, frozen=True):
    message_id: str


class AttemptRecord(_Body, frozen=True):
    message_id: str
    group: str
    topic: str
    attempt: int
    consumer: str
    outcome: str
    error: str
    delivered_at: int
    finished_at: int
    message_group: str = ""


class MessageHistoryResponse(_Body, frozen=True):
    attempts: list[AttemptRecord]


class ReportOutcomesRequest(_Body, frozen=True):
    group: str
    consumer: str
    attempts: list[AttemptRecord]


class BrowseRequest(_Body, frozen=True):
    topic: str
    queue_id: int = 0
    offset: int = 0
    max_count: int = 32


class RedriveRequest(_Body, frozen=True):
    group: str
    dlq_offsets: list[int]
    target: str = "origin"  # origin | retry
    operator: str = ""


class RedriveItem(_Body, frozen=True):
    dlq_offset: int
    message_id: str
    status: str  # resent | already | missing | failed: ...
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


class RedriveResponse(_Body, frozen=True):
    items: list[RedriveItem]
    already_redriven: list[int] = []


# -- administration -------------------------------------------------------------------------


class TopicSpec(_Body, frozen=True):
    name: str
    queues: int = 8
    topic_type: str = "normal"  # normal | fifo | delay | transaction
    perm: int = 6  # 4 read + 2 write


class GroupSpec(_Body, frozen=True):
    name: str
    fifo: bool = False
    max_retries: int = 16
    retry_delays_ms: list[int] = []  # customized policy; empty = the default delay levels
    broadcast: bool = False
    consume_from: str = "first"  # first | last
    retry_initial_ms: int = 0  # > 0: exponential policy
    retry_multiplier: float = 2.0
    retry_max_ms: int = 0


class NameRequest(_Body, frozen=True):
    name: str


class ListTopicsResponse(_Body, frozen=True):
    topics: list[TopicSpec]


class ListGroupsResponse(_Body, frozen=True):
    groups: list[GroupSpec]


class BrokerStatusResponse(_Body, frozen=True):
    broker_name: str
    version: str
    counters: dict[str, int]
    store: dict[str, Any]
    replication: dict[str, Any] = {}


class QueueStatusRequest(_Body, frozen=True):
    topic: str
    group: str = ""


class QueueStatus(_Body, frozen=True):
    queue_id: int
    min_offset: int
    max_offset: int
    committed_offset: int = -1


class QueueStatusResponse(_Body, frozen=True):
    topic: str
    broker_name: str
    queues: list[QueueStatus]


# -- routing --------------------------------------------------------------------------------


class BrokerAddress(_Body, frozen=True):
    name: str
    address: str
    grpc_address: str = ""
    # replication (docs/replication.md): the id in its group, its role and term, and where a
    # master's slaves connect
    broker_id: int = 0
    role: str = "master"
    epoch: int = 0
    ha_address: str = ""


class QueueRoute(_Body, frozen=True):
    broker_name: str
    queue_id: int
    perm: int


class GetRouteRequest(_Body, frozen=True):
    topic: str


class RouteResponse(_Body, frozen=True):
    topic: str
    topic_type: str
    brokers: list[BrokerAddress]
    queues: list[QueueRoute]


class RegisterBrokerRequest(_Body, frozen=True):
    broker: BrokerAddress
    topics: list[TopicSpec]


class ListBrokersResponse(_Body, frozen=True):
    brokers: list[BrokerAddress]


class RegisterBrokerResponse(_Body, frozen=True):
    """The name server's answer to a registration: who is the group's master now (a master
    that lost its term learns it here and becomes a slave, docs/replication.md §6)."""

    master_address: str = ""
    master_ha_address: str = ""
    master_epoch: int = 0


class PromoteRequest(_Body, frozen=True):
    """Make this slave the master of its group (``force``: even when it is not in sync)."""

    force: bool = False


class PromoteResponse(_Body, frozen=True):
    epoch: int
    log_end: int


# -- registry -------------------------------------------------------------------------------

REQUESTS: Final[dict[int, type[_Body]]] = {
    RequestCode.HELLO: HelloRequest,
    RequestCode.HEARTBEAT: HeartbeatRequest,
    RequestCode.UNREGISTER_CLIENT: UnregisterRequest,
    RequestCode.SEND: SendRequest,
    RequestCode.SEND_BACK: SendBackRequest,
    RequestCode.END_TRANSACTION: EndTransactionRequest,
    RequestCode.PULL: PullRequest,
    RequestCode.POP: PopRequest,
    RequestCode.ACK: AckRequest,
    RequestCode.CHANGE_INVISIBLE: ChangeInvisibleRequest,
    RequestCode.COMMIT_OFFSET: CommitOffsetRequest,
    RequestCode.QUERY_OFFSET: QueryOffsetRequest,
    RequestCode.GET_CONSUMERS: GetConsumersRequest,
    RequestCode.LOCK_QUEUES: LockQueuesRequest,
    RequestCode.UNLOCK_QUEUES: LockQueuesRequest,
    RequestCode.QUERY_MESSAGE: QueryMessageRequest,
    RequestCode.MESSAGE_HISTORY: MessageHistoryRequest,
    RequestCode.REPORT_OUTCOMES: ReportOutcomesRequest,
    RequestCode.BROWSE: BrowseRequest,
    RequestCode.REDRIVE: RedriveRequest,
    RequestCode.QUERY_TRANSACTION: TransactionStateRequest,
    RequestCode.CREATE_TOPIC: TopicSpec,
    RequestCode.DELETE_TOPIC: NameRequest,
    RequestCode.LIST_TOPICS: Empty,
    RequestCode.CREATE_GROUP: GroupSpec,
    RequestCode.DELETE_GROUP: NameRequest,
    RequestCode.LIST_GROUPS: Empty,
    RequestCode.BROKER_STATUS: Empty,
    RequestCode.QUEUE_STATUS: QueueStatusRequest,
    RequestCode.REGISTER_BROKER: RegisterBrokerRequest,
    RequestCode.GET_ROUTE: GetRouteRequest,
    RequestCode.LIST_BROKERS: Empty,
    RequestCode.CHECK_TRANSACTION: CheckTransactionRequest,
    RequestCode.CONSUMERS_CHANGED: ConsumersChangedNotice,
    RequestCode.PROMOTE: PromoteRequest,
}

RESPONSES: Final[dict[int, type[_Body]]] = {
    RequestCode.HELLO: HelloResponse,
    RequestCode.SEND: SendResponse,
    RequestCode.PULL: PullResponse,
    RequestCode.POP: PopResponse,
    RequestCode.ACK: AckResponse,
    RequestCode.CHANGE_INVISIBLE: ChangeInvisibleResponse,
    RequestCode.QUERY_OFFSET: QueryOffsetResponse,
    RequestCode.GET_CONSUMERS: GetConsumersResponse,
    RequestCode.LOCK_QUEUES: LockQueuesResponse,
    RequestCode.QUERY_MESSAGE: QueryMessageResponse,
    RequestCode.MESSAGE_HISTORY: MessageHistoryResponse,
    RequestCode.BROWSE: QueryMessageResponse,
    RequestCode.REDRIVE: RedriveResponse,
    RequestCode.END_TRANSACTION: EndTransactionResponse,
    RequestCode.QUERY_TRANSACTION: TransactionStateResponse,
    RequestCode.LIST_TOPICS: ListTopicsResponse,
    RequestCode.LIST_GROUPS: ListGroupsResponse,
    RequestCode.BROKER_STATUS: BrokerStatusResponse,
    RequestCode.QUEUE_STATUS: QueueStatusResponse,
    RequestCode.GET_ROUTE: RouteResponse,
    RequestCode.LIST_BROKERS: ListBrokersResponse,
    RequestCode.REGISTER_BROKER: RegisterBrokerResponse,
    RequestCode.PROMOTE: PromoteResponse,
}

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def encode_body(body: msgspec.Struct) -> bytes:
    return _encoder.encode(body)


T = TypeVar("T")


def decode_body(data: bytes, kind: type[T]) -> T:
    """Decode ``data`` as ``kind``; a mismatch is a :class:`ProtocolError` that names the field."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind)
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"invalid {kind.__name__}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"malformed {kind.__name__} body: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"invalid {kind.__name__}: a string is not UTF-8 ({exc})") from None
