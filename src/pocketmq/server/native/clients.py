"""The native handlers of client registrations: ``HEARTBEAT`` and ``UNREGISTER_CLIENT``.

With authentication a client id is only what a client calls itself, so what a registration may
touch follows the connection's user (docs/security.md, "Clients and their registrations"):

- a producer registration is its user's (broker/producers.py keys them by user and client id),
  and a transaction check reaches it only while its user still exists with the secret it signed
  in with and may publish to the half message's topic (RocketMQ 5's ACL 2.0: ``Pub``);
- a normal user's ``UNREGISTER_CLIENT`` leaves only its own client id, only the groups it names
  or registered on this connection, a consumer group only with ``Sub`` on it, and removes only
  its own producer registrations;
- a gateway (the broker's proxy workers, or a super user) speaks for the clients it relays
  (docs/protocol.md, "Gateways") and checks their rights itself; what it unregisters is what
  it registered (producers: through this connection; consumers: the groups it names).
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.broker import Broker, ClientInfo, TransactionCheck
from pocketmq.errors import NoPermissionError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.acl import Action
from pocketmq.server.auth.authorizer import Authorizer, topic_need
from pocketmq.server.auth.cluster import CLUSTER_USER
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.auth.users import GATEWAY_USER, UserStore
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.convert import to_wire
from pocketmq.server.native.gateway_state import RelayedClient, remember

__all__ = ["ClientHandlers", "relays"]


def relays(conn: ServerConnection, users: UserStore | None) -> bool:
    """Whether ``conn`` may speak for clients of its own (a gateway): anyone on a broker without
    authentication, else only the gateway identity, the cluster's members (a stand-alone proxy
    with the cluster key) and super users."""
    if users is None:
        return True
    if conn.user in (GATEWAY_USER, CLUSTER_USER):
        return True
    return users.user_type(conn.user) == "super"


def may_see_checks(
    conn: ServerConnection, authorizer: Authorizer | None
) -> Callable[[str], bool] | None:
    """Whether the connection's producer may be shown a half message of a topic: its user still
    signed in as it did, and allowed to publish there (None: no authentication, any may)."""
    credential = conn.credential
    if credential is None:
        return None

    def may_check(topic: str) -> bool:
        if conn.closed or not credential.holds():
            return False
        need = [topic_need(topic, Action.PUB)]
        return authorizer is None or authorizer.allows(conn.user, need, conn.remote)

    return may_check


class ClientHandlers:
    """``HEARTBEAT`` and ``UNREGISTER_CLIENT`` (module doc): the registrations of the clients on
    one broker, with the rights of the connection's user."""

    def __init__(
        self, broker: Broker, users: UserStore | None, authorizer: Authorizer | None
    ) -> None:
        self._broker = broker
        self._users = users
        self._authorizer = authorizer

    def heartbeat(self, conn: ServerConnection, req: w.HeartbeatRequest) -> w.Empty:
        """Register the client's consumer groups and producer groups (a gateway: of the client it
        relays, whose consumers do not rebalance)."""
        broker = self._broker

        def notify(group: str) -> None:
            conn.push(RequestCode.CONSUMERS_CHANGED, w.ConsumersChangedNotice(group))

        relay = bool(req.protocol) and relays(conn, self._users)
        if relay:  # a gateway relays a client of its own (docs/protocol.md "Gateways")
            info = ClientInfo(req.protocol, req.language, req.client_version, req.address)
            remember(
                conn.state.setdefault("relayed", {}),
                req.client_id,
                RelayedClient(
                    req.protocol, req.language, bool(req.producer_groups), bool(req.consumers)
                ),
            )
        else:
            conn.client_id = req.client_id
            language, version = conn.state.get("client", ("", ""))
            info = ClientInfo("native", language, version, conn.remote)
            conn.state["groups"] = {c.group for c in req.consumers}
        broker.heartbeat(
            req.client_id,
            [(c.group, c.model, c.subscriptions) for c in req.consumers],
            None if relay else notify,  # a gateway's clients do not rebalance
            info,
        )
        if req.producer_groups:
            self._register_producer(conn, req, relay)
        return w.Empty()

    def _register_producer(
        self, conn: ServerConnection, req: w.HeartbeatRequest, relay: bool
    ) -> None:
        """The heartbeat's producer groups: a transaction's check-back for them is pushed on
        this connection while it is open (and, with authentication, while its user may see the
        half message's topic)."""
        name = self._broker.name

        def check(item: TransactionCheck) -> bool:
            if conn.closed:
                return False
            conn.push(
                RequestCode.CHECK_TRANSACTION,
                w.CheckTransactionRequest(
                    item.producer_group,
                    item.transaction_id,
                    to_wire(item.message, name),
                    req.client_id,
                ),
            )
            return True

        self._broker.heartbeat_producer(
            req.client_id,
            req.producer_groups,
            check,
            owner=conn,
            user=conn.user,
            may_check=None if relay else may_see_checks(conn, self._authorizer),
        )
        if not relay:
            conn.state["producer_groups"] = set(req.producer_groups)

    def unregister(self, conn: ServerConnection, req: w.UnregisterRequest) -> w.Empty:
        """Take a client out of the groups it registered (module doc: what each user may
        unregister)."""
        broker = self._broker
        if relays(conn, self._users):  # a gateway's client, a super user's, or no authentication
            conn.state.get("relayed", {}).pop(req.client_id, None)
            if req.groups:  # none named: of no consumer group (a producer leaving)
                broker.unregister(req.client_id, req.groups)
            broker.unregister_producer(req.client_id, req.groups or None, owner=conn)
        else:
            self._unregister_own(conn, req)
        return w.Empty()

    def _unregister_own(self, conn: ServerConnection, req: w.UnregisterRequest) -> None:
        if req.client_id != conn.client_id:
            count_failure("native", "forbidden")
            raise NoPermissionError(
                f"client {conn.client_id!r} may unregister only itself, not {req.client_id!r}"
            )
        producer_groups: set[str] = conn.state.get("producer_groups", set())
        consumer_groups: set[str] = conn.state.get("groups", set())
        named = req.groups or sorted(producer_groups | consumer_groups)
        leaving = [g for g in named if g not in producer_groups or g in consumer_groups]
        authorizer = self._authorizer
        if authorizer is not None and leaving:
            try:
                authorizer.check(
                    conn.user, [("Group", g, Action.SUB) for g in leaving], conn.remote
                )
            except NoPermissionError:
                count_failure("native", "forbidden")
                raise
        if leaving:
            self._broker.unregister(req.client_id, leaving)
            conn.state["groups"] = consumer_groups - set(leaving)
        self._broker.unregister_producer(req.client_id, named, user=conn.user)

    def table(self) -> HandlerTable:
        """The family's request codes and their handlers."""
        return {
            RequestCode.HEARTBEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
        }
