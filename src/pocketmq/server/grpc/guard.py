"""Who a gRPC client is and what its session may do, beyond the per-call checks.

The interceptor (server/grpc/auth.py) checks each call's signature and, for calls with one
request, its needs (server/grpc/permissions.py). What it cannot see is decided here, for the
adapter (docs/security.md, "Clients and their registrations"):

- **who**: the access key of the call's verified signature (the interceptor refused any other),
  with the ``x-mq-client-id`` the client calls itself — sessions are keyed by both;
- **Telemetry settings**, which arrive inside a stream: a producer needs ``Pub`` on every topic
  it says it publishes to, a consumer ``Sub`` on its group and each subscribed topic, as RocketMQ
  5's ACL 2.0 asks;
- **check-backs**, which are pushes, not calls: a producer is shown a half message only while its
  stream's user still exists with the secret it signed in with and may publish to the topic;
- **the stream itself**: a :class:`~pocketmq.server.auth.credential.Credential` per Telemetry
  stream, so the stream ends once its user is deleted or changes its secret.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from pocketmq.errors import NoPermissionError
from pocketmq.model import ClientInfo
from pocketmq.server.auth.acl import Action
from pocketmq.server.auth.authorizer import Authorizer, Need, topic_need
from pocketmq.server.auth.credential import Credential
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.auth.signature import parse_authorization
from pocketmq.server.auth.users import UserStore
from pocketmq.server.grpc.pb import ClientType
from pocketmq.server.grpc.settings import CONSUMER_TYPES
from pocketmq.server.ratelog import RateLimitedLog

__all__ = ["ClientGuard", "caller_id", "client_info"]

log = RateLimitedLog(logging.getLogger("pocketmq.server.grpc"))

_CLIENT_ID: Final = "x-mq-client-id"


def caller_id(context: Any) -> str:
    """The client id a call names (``x-mq-client-id``; the peer when it is missing)."""
    for key, value in context.invocation_metadata() or ():
        if key == _CLIENT_ID:
            return str(value)
    return str(context.peer())


def client_info(context: Any, real_peer: Callable[[str], str] = str) -> ClientInfo:
    """What an official client says about itself in its headers (RocketMQ 5's ``x-mq-language``
    and ``x-mq-client-version``), and the peer gRPC saw."""
    headers = dict(context.invocation_metadata() or ())
    peer = real_peer(str(context.peer() or ""))
    address = peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer
    return ClientInfo(
        "grpc",
        str(headers.get("x-mq-language", "")).lower(),
        str(headers.get("x-mq-client-version", "")),
        address,
    )


class ClientGuard:
    """The adapter's view of its clients' identities and rights (module doc); with neither
    users nor an authorizer every client is "" and may do everything, as before."""

    def __init__(self, users: UserStore | None = None, authorizer: Authorizer | None = None):
        self.users = users
        self._authorizer = authorizer

    def identity(self, context: Any) -> tuple[str, str]:
        """(user, client id) of a call: the signed access key ("" without authentication) and
        the ``x-mq-client-id`` header (the peer when it is missing)."""
        user = client_id = ""
        for key, value in context.invocation_metadata() or ():
            if key == _CLIENT_ID:
                client_id = str(value)
            elif key == "authorization" and self.users is not None:
                parsed = parse_authorization(str(value))
                user = parsed.access_key if parsed is not None else ""
        return user, client_id or str(context.peer())

    def credential(self, user: str) -> Credential | None:
        """What ends a stream opened now by ``user`` once the user goes (None: no auth)."""
        return Credential(self.users, user) if self.users is not None else None

    def check_settings(self, user: str, settings: Any, source: str) -> None:
        """Raise :class:`NoPermissionError` unless ``user`` may hold these Telemetry settings."""
        needs: list[Need] = []
        if settings.client_type == ClientType.PRODUCER and settings.HasField("publishing"):
            needs = [topic_need(t.name, Action.PUB) for t in settings.publishing.topics]
        elif settings.client_type in CONSUMER_TYPES and settings.HasField("subscription"):
            subscription = settings.subscription
            needs = [("Group", subscription.group.name, Action.SUB)]
            needs += [topic_need(e.topic.name, Action.SUB) for e in subscription.subscriptions]
        self.check(user, needs, source)

    def check(self, user: str, needs: list[Need], source: str) -> None:
        """The ACL's check, counted and logged as the interceptor's are."""
        if self._authorizer is None or not needs:
            return
        try:
            self._authorizer.check(user, needs, source)
        except NoPermissionError as exc:
            count_failure("grpc", "forbidden")
            log.warning("forbidden", "refused a gRPC call of %r: %s", user, exc)
            raise

    def may_check(
        self, user: str, credential: Credential | None, source: str
    ) -> Callable[[str], bool] | None:
        """Whether a producer of ``user`` may be shown a half message of a topic now (module
        doc); None when every producer may (no authentication)."""
        authorizer = self._authorizer
        if credential is None and authorizer is None:
            return None

        def may_check(topic: str) -> bool:
            if credential is not None and not credential.holds():
                return False
            need = [topic_need(topic, Action.PUB)]
            return authorizer is None or authorizer.allows(user, need, source)

        return may_check
