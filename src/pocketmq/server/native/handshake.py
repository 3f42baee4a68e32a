"""The native handshake's handlers, shared by the broker's port and the name server's:
``HELLO`` (with a challenge when the port requires authentication) and ``AUTHENTICATE`` (the
check is :class:`~pocketmq.server.auth.handshake.Authenticator`), and what each identity may ask
for once authenticated (docs/security.md, "Who may do what, per port").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.cluster import CLUSTER_USER
from pocketmq.server.auth.credential import Credential
from pocketmq.server.auth.handshake import Attempt, Authenticator
from pocketmq.server.auth.users import GATEWAY_USER
from pocketmq.server.native.connection import Handler, ServerConnection

__all__ = [
    "MEMBER_OPERATIONS",
    "NAMESRV_USER_OPERATIONS",
    "authenticate_handler",
    "broker_permissions",
    "greet",
    "namesrv_permissions",
]

_R = RequestCode

MEMBER_OPERATIONS: Final = frozenset(
    {
        # the handshake and the connection
        _R.HELLO, _R.AUTHENTICATE, _R.CANCEL,
        # relaying clients, as a gateway does (a stand-alone proxy with the cluster key)
        _R.HEARTBEAT, _R.UNREGISTER_CLIENT, _R.SEND, _R.RECALL, _R.END_TRANSACTION,
        _R.PULL, _R.POP, _R.ACK, _R.CHANGE_INVISIBLE, _R.FORWARD_TO_DEAD_LETTER, _R.SEND_BACK,
        _R.REPORT_OUTCOMES, _R.COMMIT_OFFSET, _R.QUERY_OFFSET, _R.GET_CONSUMERS,
        _R.LOCK_QUEUES, _R.UNLOCK_QUEUES, _R.GATEWAY_INFO, _R.GATEWAY_GROUP,
        # what components read of each other
        _R.GET_ROUTE, _R.LIST_BROKERS, _R.LIST_TOPICS, _R.LIST_GROUPS, _R.BROKER_STATUS,
        _R.QUEUE_STATUS, _R.BROKER_OVERVIEW,
    }
)  # fmt: skip
"""What a member of the cluster (``cluster/inner``) may ask a broker: relay clients and read what
components need — never administer (topics, groups, offsets, redrives, roles) nor read messages
outside a consumer's flow (browse, queries, history). An operation added later is refused until
it is listed here."""

NAMESRV_USER_OPERATIONS: Final = frozenset(
    {_R.HELLO, _R.AUTHENTICATE, _R.GET_ROUTE, _R.LIST_BROKERS}
)
"""What a user may ask a name server: routes and the broker list, never a registration."""


def greet(conn: ServerConnection, req: w.HelloRequest, authenticator: Authenticator | None) -> str:
    """Accept the ``HELLO`` on ``conn``; returns the challenge for its answer ("" when the port
    does not require authentication)."""
    conn.greeted = True
    conn.client_id = req.client_id
    conn.state["client"] = (req.language, req.client_version)
    if authenticator is None:
        return ""
    challenge = authenticator.challenge()
    conn.auth_required = True
    conn.state["handshake"] = (challenge, req.client_nonce)
    return challenge


def authenticate_handler(
    authenticator: Authenticator | None,
    server_name: Callable[[], str],
    permitted: Callable[[str], frozenset[int] | None] = lambda user: None,
) -> Handler:
    """``AUTHENTICATE`` for a port: verifies the proof made for ``server_name()`` (what the
    port's HELLO answer named), answers with the server's proof, and limits the identity to
    ``permitted(access key)`` (None: any operation of the port). A failure closes the
    connection after its answer: one guess per connection."""

    def authenticate(conn: ServerConnection, req: w.AuthenticateRequest) -> w.AuthenticateResponse:
        handshake = conn.state.get("handshake")
        if authenticator is None or handshake is None:
            return w.AuthenticateResponse()  # nothing to prove on a port without authentication
        challenge, client_nonce = handshake
        attempt = Attempt(
            req.access_key,
            req.signature,
            req.server_address,
            challenge,
            client_nonce,
            conn.client_id,
            server_name(),
            conn.local_address,
            conn.peer_host,
        )
        try:
            proof = authenticator.verify(attempt)
        except PocketMQError as exc:
            conn.close_after_reply()
            conn.bad_input_log.warning(
                "unauthenticated", "refused a native login from %s: %s", conn.remote or "?", exc
            )
            raise
        del conn.state["handshake"]
        conn.user = req.access_key
        conn.permitted = permitted(req.access_key)
        users = authenticator.users
        if users is not None and req.access_key not in (GATEWAY_USER, CLUSTER_USER):
            # refused from the next request on once the user goes (auth/credential.py)
            conn.credential = Credential(users, req.access_key)
        return w.AuthenticateResponse(proof)

    return authenticate


def broker_permissions(user: str) -> frozenset[int] | None:
    """A broker's rule: a member of the cluster is limited to :data:`MEMBER_OPERATIONS`; users
    (checked by the ACL) and the broker's own workers are not limited here."""
    return MEMBER_OPERATIONS if user == CLUSTER_USER else None


def namesrv_permissions(user: str) -> frozenset[int] | None:
    """A name server's rule: members may register; users only read routes."""
    return None if user == CLUSTER_USER else NAMESRV_USER_OPERATIONS
