"""Messages on the wire: what producers send, what consumers receive, what a send answers,
and the transaction bodies (end, check-back, state).

The messages themselves are :mod:`pocketmq.model`'s values, carried as they are (both sides decode
them straight into what the broker stores and the SDK hands out).
"""

from __future__ import annotations

from pocketmq.model.messages import Delivered, InboundMessage
from pocketmq.protocol.body import Body

__all__ = [
    "CheckTransactionRequest",
    "Delivered",
    "EndTransactionRequest",
    "EndTransactionResponse",
    "InboundMessage",
    "SendBackRequest",
    "SendRequest",
    "SendResponse",
    "SendResultItem",
    "TransactionStateRequest",
    "TransactionStateResponse",
]


class SendRequest(Body, frozen=True):
    """A batch of messages stored in one request (one frame, one append); ``producer_group`` is the
    group a half message's check-back goes to."""

    messages: list[InboundMessage]
    producer_group: str = ""
    # where the messages were born when the sender relays them (a gRPC gateway); empty: the
    # connection's own address
    born_host: str = ""


class SendResultItem(Body, frozen=True):
    """The result of one message of a send: each message is refused or stored on its own, so one bad
    message never fails its batch."""

    code: int
    remark: str = ""
    message_id: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    transaction_id: str = ""
    physical_offset: int = -1
    recall_handle: str = ""  # delayed messages: cancels the delivery (RECALL)
    rule: str = ""  # the send-contract rule a refused message broke (pocketmq.contract.Rule)


class SendResponse(Body, frozen=True):
    """One result per message of the request, in order, and the broker that stored them (a half
    message must be ended on the same broker)."""

    results: list[SendResultItem]
    broker_name: str = ""


class SendBackRequest(Body, frozen=True):
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


class EndTransactionRequest(Body, frozen=True):
    """Commit (``commit=True``) or roll back a half message; ``from_check`` marks the answer to
    a CHECK_TRANSACTION. ``producer_group``, ``transaction_id`` and ``topic`` (the real topic)
    must all be the half message's, or the end is refused (docs/transactions.md)."""

    producer_group: str
    message_id: str
    transaction_id: str
    commit: bool
    from_check: bool = False
    physical_offset: int = -1  # informational: the half message's offset from the send result
    topic: str = ""
    # a gateway: the user its client signed in as, recorded with the outcome (ignored from
    # anyone but a gateway identity or super user, like SEND's born host)
    user: str = ""


class EndTransactionResponse(Body, frozen=True):
    """The transaction's final state; ``duplicate`` says this outcome had already been recorded, so
    a retried end is recognised as harmless."""

    state: str  # COMMITTED | ROLLED_BACK | DISCARDED
    duplicate: bool = False  # it had already ended this way: nothing changed


class CheckTransactionRequest(Body, frozen=True):
    """Broker → producer (one-way): what became of this transaction? The message carries its
    real topic and queue; its property ``TRANSACTION_CHECK_TIMES`` is this check's number."""

    producer_group: str
    transaction_id: str
    message: Delivered
    client_id: str = ""  # the producer asked, when one connection carries several (a gateway)


class TransactionStateRequest(Body, frozen=True):
    """Asks for the broker's record of a message's transaction (operators and tests: why was it
    discarded, how often was it checked)."""

    message_id: str


class TransactionStateResponse(Body, frozen=True):
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


class RecallRequest(Body, frozen=True):
    """Cancels a delayed message before it is due, by the recall handle its send answered."""

    topic: str
    recall_handle: str


class RecallResponse(Body, frozen=True):
    """The id of the message whose delivery was cancelled."""

    message_id: str
