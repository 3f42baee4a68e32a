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
    """The body of a request that needs no arguments (listing topics, groups, brokers, the broker's
    status) and of a plain "ok" response."""


class ErrorBody(_Body, frozen=True):
    """What a response with a result code other than SUCCESS carries: the reason in words, for the
    error the client raises."""

    remark: str = ""


# -- handshake and membership ---------------------------------------------------------------


class HelloRequest(_Body, frozen=True):
    """The first frame of every connection: the protocol version to check, and who the client is
    (its id names it in consumer groups and locks)."""

    protocol_version: int
    client_id: str
    client_version: str = ""
    language: str = "python"


class HelloResponse(_Body, frozen=True):
    """The server's identity and its limits, so a client sizes its batches to what the server
    accepts and closes an idle connection before the server does."""

    protocol_version: int
    server_version: str
    server_name: str
    role: str  # "broker" | "namesrv"
    max_frame_body: int
    max_message_size: int
    # the server closes a connection idle this long (0: never); clients close theirs sooner
    idle_timeout_ms: int = 0


class ConsumerRegistration(_Body, frozen=True):
    """One consumer group a client is a member of, with its subscriptions: what rebalancing and the
    retry topic subscription are computed from."""

    group: str
    model: str  # "clustering" | "broadcasting"
    subscriptions: dict[str, str]  # topic -> filter expression


class HeartbeatRequest(_Body, frozen=True):
    """Sent every 10 s: keeps the client's consumer memberships and its producer groups (which
    answer transaction checks) alive on the broker."""

    client_id: str
    producer_groups: list[str] = []
    consumers: list[ConsumerRegistration] = []


class UnregisterRequest(_Body, frozen=True):
    """A client leaving (all its groups, or the named ones), so its queues move to the other members
    at once instead of after the heartbeat expiry."""

    client_id: str
    groups: list[str] = []


class GetConsumersRequest(_Body, frozen=True):
    """Asks for a group's members: each push consumer computes its own share of the queues from the
    same sorted list."""

    group: str


class GetConsumersResponse(_Body, frozen=True):
    """The client ids of a group's live members."""

    client_ids: list[str]


class ConsumersChangedNotice(_Body, frozen=True):
    """Broker → consumer (one-way): the group's membership changed, rebalance now rather than at the
    next periodic rebalance."""

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
    """A batch of messages stored in one request (one frame, one append); ``producer_group`` is the
    group a half message's check-back goes to."""

    messages: list[WireMessage]
    producer_group: str = ""


class SendResultItem(_Body, frozen=True):
    """The result of one message of a send: each message is refused or stored on its own, so one bad
    message never fails its batch."""

    code: int
    remark: str = ""
    message_id: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    transaction_id: str = ""
    physical_offset: int = -1


class SendResponse(_Body, frozen=True):
    """One result per message of the request, in order, and the broker that stored them (a half
    message must be ended on the same broker)."""

    results: list[SendResultItem]
    broker_name: str = ""


class SendBackRequest(_Body, frozen=True):
    """A consumer hands back a message it failed on, named by its physical offset: the broker
    re-stores it for a retry (or dead-letters it) and records the attempt."""

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
    """The transaction's final state; ``duplicate`` says this outcome had already been recorded, so
    a retried end is recognised as harmless."""

    state: str  # COMMITTED | ROLLED_BACK | DISCARDED
    duplicate: bool = False  # it had already ended this way: nothing changed


class CheckTransactionRequest(_Body, frozen=True):
    """Broker → producer (one-way): what became of this transaction? The message carries its
    real topic and queue; its property ``TRANSACTION_CHECK_TIMES`` is this check's number."""

    producer_group: str
    transaction_id: str
    message: DeliveredMessage


class TransactionStateRequest(_Body, frozen=True):
    """Asks for the broker's record of a message's transaction (operators and tests: why was it
    discarded, how often was it checked)."""

    message_id: str


class TransactionStateResponse(_Body, frozen=True):
    """The broker's record of one transaction: its state, who decided it and when, and how many
    checks reached a producer."""

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
    """Read a queue from an offset the consumer keeps itself (push consumers, 4.x style);
    ``max_wait_ms`` turns an empty read into a long poll."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int = 32
    expression: str = "*"
    max_wait_ms: int = 0


class PullResponse(_Body, frozen=True):
    """The messages read and where to read next: after ``OFFSET_ILLEGAL`` (an offset that fell out
    of retention) ``next_offset`` is the nearest valid one, so a consumer moves on instead of
    failing; ``min_offset``/``max_offset`` are the queue's range, for lag."""

    status: str  # FOUND | NO_NEW_MESSAGE | NO_MATCHED_MESSAGE | OFFSET_ILLEGAL
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[DeliveredMessage] = []


class PopRequest(_Body, frozen=True):
    """Take messages from any queue of a topic and hide them for ``invisible_ms`` (simple consumers,
    5.x style); a retry with the same ``attempt_id`` gets the same messages."""

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
    """The messages taken, each with the receipt handle that acknowledges or re-hides it."""

    messages: list[DeliveredMessage]


class AckEntry(_Body, frozen=True):
    """One popped message to acknowledge, named by its topic and receipt handle."""

    topic: str
    receipt_handle: str


class AckRequest(_Body, frozen=True):
    """Acknowledge popped messages in one request; each entry succeeds or fails on its own."""

    group: str
    entries: list[AckEntry]
    consumer: str = ""


class AckResponse(_Body, frozen=True):
    """One result code per entry (and its reason), so a stale handle fails only its own message."""

    codes: list[int]
    remarks: list[str] = []


class ChangeInvisibleRequest(_Body, frozen=True):
    """Hide a popped message again for ``invisible_ms`` (a nack with a delay); ``error`` is recorded
    in the message's attempt history."""

    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int
    error: str = ""
    consumer: str = ""


class ChangeInvisibleResponse(_Body, frozen=True):
    """The message's new receipt handle: the old one is stale once the message was hidden again."""

    receipt_handle: str


class OffsetEntry(_Body, frozen=True):
    """A consumer group's next offset to read in one queue."""

    topic: str
    queue_id: int
    offset: int


class CommitOffsetRequest(_Body, frozen=True):
    """Commit a group's offsets in one request, all or nothing, so a bad entry cannot leave the
    table half updated."""

    group: str
    entries: list[OffsetEntry]


class QueueRef(_Body, frozen=True):
    """One queue of a topic, the unit of an orderly consumer's lock."""

    topic: str
    queue_id: int


class LockQueuesRequest(_Body, frozen=True):
    """An orderly consumer asks to own queues exclusively (and UNLOCK_QUEUES gives them back), so
    two members never consume one queue at the same time."""

    group: str
    client_id: str
    queues: list[QueueRef]


class LockQueuesResponse(_Body, frozen=True):
    """The queues the client holds now; the others belong to another member until its locks
    expire."""

    granted: list[QueueRef]


class QueryOffsetRequest(_Body, frozen=True):
    """Asks for a group's committed offset in one queue, where a consumer starts after a
    rebalance."""

    group: str
    topic: str
    queue_id: int


class QueryOffsetResponse(_Body, frozen=True):
    """The committed offset, or -1 when the group has none (then its consume-from position
    applies)."""

    offset: int


# -- queries --------------------------------------------------------------------------------


class QueryMessageRequest(_Body, frozen=True):
    """Look up messages by id, or by topic and business key, through the store's index; paged with
    ``skip`` so any number of matches fits in frames."""

    message_id: str = ""
    topic: str = ""
    key: str = ""
    max_count: int = 32
    skip: int = 0  # results already received (the next page starts after them)


class QueryMessageResponse(_Body, frozen=True):
    """One page of matches (also BROWSE's answer); ``more`` says the page was cut to fit a frame."""

    messages: list[DeliveredMessage]
    more: bool = False  # cut to fit a frame: ask again with skip += len(messages)


class MessageHistoryRequest(_Body, frozen=True):
    """Asks for every delivery attempt of one message (``pocketmq message history``)."""

    message_id: str


class AttemptRecord(_Body, frozen=True):
    """One delivery attempt as the attempt history keeps it: who got the message, when, and how it
    ended, so an operator can see why a message was retried or dead-lettered."""

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
    """The attempts recorded for a message, oldest first."""

    attempts: list[AttemptRecord]


class ReportOutcomesRequest(_Body, frozen=True):
    """Push consumers report the attempts that succeeded (one-way, batched): pull mode has no ack,
    so the history would otherwise only know the failures."""

    group: str
    consumer: str
    attempts: list[AttemptRecord]


class BrowseRequest(_Body, frozen=True):
    """Read any topic from an offset without consuming it and without a group (operators, exports):
    dead-letter topics and the internal ledgers too."""

    topic: str
    queue_id: int = 0
    offset: int = 0
    max_count: int = 32


class RedriveRequest(_Body, frozen=True):
    """Resend dead letters of a group, named by their DLQ offsets, to their origin topic or the
    group's retry topic."""

    group: str
    dlq_offsets: list[int]
    target: str = "origin"  # origin | retry
    operator: str = ""


class RedriveItem(_Body, frozen=True):
    """What happened to one dead letter of a redrive, so a redrive interrupted half-way can be run
    again and resends only what it had not."""

    dlq_offset: int
    message_id: str
    status: str  # resent | already | missing | failed: ...
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


class RedriveResponse(_Body, frozen=True):
    """One item per offset asked for; ``already_redriven`` lists offsets an earlier redrive had
    resent."""

    items: list[RedriveItem]
    already_redriven: list[int] = []


# -- administration -------------------------------------------------------------------------


class TopicSpec(_Body, frozen=True):
    """A topic's definition, as created and listed, and as a broker registers it with the name
    server."""

    name: str
    queues: int = 8
    topic_type: str = "normal"  # normal | fifo | delay | transaction
    perm: int = 6  # 4 read + 2 write


class GroupSpec(_Body, frozen=True):
    """A consumer group's definition: its consumption mode, retry policy (delays in ms on the wire)
    and where a new group starts."""

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
    """Names the topic or group to delete."""

    name: str


class ListTopicsResponse(_Body, frozen=True):
    """Every topic of the broker."""

    topics: list[TopicSpec]


class ListGroupsResponse(_Body, frozen=True):
    """Every consumer group of the broker."""

    groups: list[GroupSpec]


class BrokerStatusResponse(_Body, frozen=True):
    """The broker's counters and store statistics (``pocketmq broker status``, benchmarks): a
    snapshot, not a stream."""

    broker_name: str
    version: str
    counters: dict[str, int]
    store: dict[str, Any]
    replication: dict[str, Any] = {}


class QueueStatusRequest(_Body, frozen=True):
    """Asks for a topic's queue offsets, with a group's committed offsets when ``group`` is set: how
    far behind a group is."""

    topic: str
    group: str = ""


class QueueStatus(_Body, frozen=True):
    """One queue's retained range and, with a group, its committed offset (-1: none)."""

    queue_id: int
    min_offset: int
    max_offset: int
    committed_offset: int = -1


class QueueStatusResponse(_Body, frozen=True):
    """The status of every queue of a topic on this broker."""

    topic: str
    broker_name: str
    queues: list[QueueStatus]


# -- routing --------------------------------------------------------------------------------


class BrokerAddress(_Body, frozen=True):
    """Where to reach a broker on each protocol, as routes and registrations carry it (with its role
    in a replicated group)."""

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
    """One queue of a topic and the broker that owns it, with its permission (a read-only queue
    takes no sends)."""

    broker_name: str
    queue_id: int
    perm: int


class GetRouteRequest(_Body, frozen=True):
    """Asks where a topic's queues are; any broker answers (from its name server) as well as the
    name server itself."""

    topic: str


class RouteResponse(_Body, frozen=True):
    """A topic's queues across the cluster and the brokers that hold them: what producers spread
    sends over and consumers rebalance."""

    topic: str
    topic_type: str
    brokers: list[BrokerAddress]
    queues: list[QueueRoute]


class RegisterBrokerRequest(_Body, frozen=True):
    """A broker announces itself and its topics to the name server every 30 s (and at once after a
    topic change); silence for 120 s removes it."""

    broker: BrokerAddress
    topics: list[TopicSpec]


class ListBrokersResponse(_Body, frozen=True):
    """The brokers the name server currently knows as live."""

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
    """The promoted broker's new epoch and where its commit log ends, the point from which its
    term's writes start."""

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
    """Encode a request or response body for a frame (MessagePack array, the structures' declaration
    order)."""
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
