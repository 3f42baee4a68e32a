"""The cluster: broker addresses and routes, registration with the name server, and
promotion of a slave (docs/replication.md).
"""

from __future__ import annotations

from pocketmq.protocol.admin import TopicSpec
from pocketmq.protocol.body import Body

__all__ = [
    "BrokerAddress",
    "GetRouteRequest",
    "ListBrokersResponse",
    "PromoteRequest",
    "PromoteResponse",
    "QueueRoute",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "RouteResponse",
]


class BrokerAddress(Body, frozen=True):
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
    # its dashboard and metrics (``host:port``, "" when its HTTP port is off): the cluster view
    # links each broker's own pages (docs/operations.md, "Cluster view")
    http_address: str = ""


class QueueRoute(Body, frozen=True):
    """One queue of a topic and the broker that owns it, with its permission (a read-only queue
    takes no sends)."""

    broker_name: str
    queue_id: int
    perm: int


class GetRouteRequest(Body, frozen=True):
    """Asks where a topic's queues are; any broker answers (from its name server) as well as the
    name server itself."""

    topic: str


class RouteResponse(Body, frozen=True):
    """A topic's queues across the cluster and the brokers that hold them: what producers spread
    sends over and consumers rebalance."""

    topic: str
    topic_type: str
    brokers: list[BrokerAddress]
    queues: list[QueueRoute]


class RegisterBrokerRequest(Body, frozen=True):
    """A broker announces itself and its topics to the name server every 30 s (and at once after a
    topic change); silence for 120 s removes it.

    ``lease_ms``: a master on a controller lease is master for at most this long from now (0: no
    limit); it registers again before then, and the name server stops taking it for the group's
    master when the time runs out (docs/replication.md §9).
    """

    broker: BrokerAddress
    topics: list[TopicSpec]
    lease_ms: int = 0


class ListBrokersResponse(Body, frozen=True):
    """The brokers the name server currently knows as live."""

    brokers: list[BrokerAddress]


class RegisterBrokerResponse(Body, frozen=True):
    """The name server's answer to a registration: who is the group's master now (a master
    that lost its term learns it here and becomes a slave, docs/replication.md §6)."""

    master_address: str = ""
    master_ha_address: str = ""
    master_epoch: int = 0


class PromoteRequest(Body, frozen=True):
    """Make this slave the master of its group (``force``: even when it is not in sync)."""

    force: bool = False


class PromoteResponse(Body, frozen=True):
    """The promoted broker's new epoch and where its commit log ends, the point from which its
    term's writes start."""

    epoch: int
    log_end: int
