"""Handshake and membership: the first frame of a connection, heartbeats, and the
members of a consumer group (what each push consumer rebalances with).
"""

from __future__ import annotations

from pocketmq.protocol.body import Body

__all__ = [
    "AuthenticateRequest",
    "AuthenticateResponse",
    "ConsumerRegistration",
    "ConsumersChangedNotice",
    "GetConsumersRequest",
    "GetConsumersResponse",
    "HeartbeatRequest",
    "HelloRequest",
    "HelloResponse",
    "UnregisterRequest",
]


class HelloRequest(Body, frozen=True):
    """The first frame of every connection: the protocol version to check, and who the client is
    (its id names it in consumer groups and locks)."""

    protocol_version: int
    client_id: str
    client_version: str = ""
    language: str = "python"
    # random, 32 hex digits: the client's part of the handshake's proofs (protocol/auth.py)
    client_nonce: str = ""


class HelloResponse(Body, frozen=True):
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
    # set when the server requires AUTHENTICATE before anything else (protocol/auth.py)
    auth_challenge: str = ""


class AuthenticateRequest(Body, frozen=True):
    """The answer to a HELLO's challenge: who the client is, and proof it knows the secret, made
    for the server address it connected to (protocol/auth.py, docs/protocol.md "Handshake")."""

    access_key: str
    signature: str  # client_proof(...)
    # the server as the client's socket sees it (normalize_address): a relay's, if it is one
    server_address: str = ""


class AuthenticateResponse(Body, frozen=True):
    """The server's side of the mutual proof: it knows the same secret (server_proof)."""

    server_proof: str = ""


class ConsumerRegistration(Body, frozen=True):
    """One consumer group a client is a member of, with its subscriptions: what rebalancing and the
    retry topic subscription are computed from."""

    group: str
    model: str  # "clustering" | "broadcasting"
    subscriptions: dict[str, str]  # topic -> filter expression


class HeartbeatRequest(Body, frozen=True):
    """Sent every 10 s: keeps the client's consumer memberships and its producer groups (which
    answer transaction checks) alive on the broker; ``producer_topics`` are what those producers
    publish to."""

    client_id: str
    producer_groups: list[str] = []
    consumers: list[ConsumerRegistration] = []
    # a gateway relaying another protocol's client describes it (empty: the connection's HELLO)
    protocol: str = ""
    language: str = ""
    client_version: str = ""
    address: str = ""
    # the topics the producer groups publish to: with authorization, registering as a producer
    # needs Pub on each (docs/security.md); an older client sends none, and its checks still
    # go only to a producer whose user may publish to the half message's topic
    producer_topics: list[str] = []


class UnregisterRequest(Body, frozen=True):
    """A client leaving (all its groups, or the named ones), so its queues move to the other members
    at once instead of after the heartbeat expiry."""

    client_id: str
    groups: list[str] = []


class GetConsumersRequest(Body, frozen=True):
    """Asks for a group's members: each push consumer computes its own share of the queues from the
    same sorted list."""

    group: str


class GetConsumersResponse(Body, frozen=True):
    """The client ids of a group's live members."""

    client_ids: list[str]


class ConsumersChangedNotice(Body, frozen=True):
    """Broker → consumer (one-way): the group's membership changed, rebalance now rather than at the
    next periodic rebalance."""

    group: str
