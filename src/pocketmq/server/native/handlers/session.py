"""The session family: ``HELLO``, ``AUTHENTICATE``, ``HEARTBEAT``, ``UNREGISTER_CLIENT`` and
``CANCEL``; and the gateway rule the other families ask (who may speak for relayed clients)."""

from __future__ import annotations

from pocketmq.broker import VERSION, Broker
from pocketmq.errors import LocalProtocolError
from pocketmq.protocol import MAX_FRAME_BODY, PROTOCOL_VERSION, RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.native.clients import ClientHandlers, relays
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.handshake import authenticate_handler, broker_permissions, greet

__all__ = ["SessionHandlers"]


class SessionHandlers:
    """A connection's greeting, sign-in, client registrations and cancellations."""

    def __init__(
        self,
        broker: Broker,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self._broker = broker
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._users = authenticator.users if authenticator is not None else None

    def may_relay(self, conn: ServerConnection) -> bool:
        """Whether ``conn`` is a gateway that may name the clients it relays (their host, their
        user): the broker's proxy workers or a super user (server/native/clients.py)."""
        return relays(conn, self._users)

    def hello(self, conn: ServerConnection, req: w.HelloRequest) -> w.HelloResponse:
        """Agree on the protocol version and tell the client this broker's limits."""
        if req.protocol_version != PROTOCOL_VERSION:
            raise LocalProtocolError(
                f"protocol version {req.protocol_version} is not supported (this broker speaks "
                f"{PROTOCOL_VERSION})"
            )
        challenge = greet(conn, req, self._authenticator)
        broker = self._broker
        return w.HelloResponse(
            PROTOCOL_VERSION,
            VERSION,
            broker.name,
            "broker",
            MAX_FRAME_BODY,
            broker.config.store.max_message_size,
            int(conn.limits.idle_timeout * 1000),
            challenge,
        )

    def cancel(self, conn: ServerConnection, req: w.CancelRequest) -> None:
        """Stop waiting for one of the connection's requests (a long poll)."""
        conn.cancel(req.request_id)

    def table(self) -> HandlerTable:
        """The family's request codes and their handlers."""
        name = self._broker.name
        return {
            RequestCode.HELLO: self.hello,
            RequestCode.AUTHENTICATE: authenticate_handler(
                self._authenticator, lambda: name, broker_permissions
            ),
            **ClientHandlers(self._broker, self._users, self._authorizer).table(),
            RequestCode.CANCEL: self.cancel,
        }
