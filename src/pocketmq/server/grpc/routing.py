"""Routes as the official clients see them: message queues with their permission, the message
types the topic accepts, and the gRPC endpoint of the broker that serves each.

The adapter answers ``QueryRoute`` from the cluster's route (the name server's, or this broker's
own); this module turns one into the other, including the rule that keeps a masterless group
writable during a failover (docs/replication.md §9).
"""

from __future__ import annotations

from typing import Any, Final

from pocketmq.protocol import structs as w
from pocketmq.server.grpc.convert import ACCEPTED_TYPES, endpoints
from pocketmq.server.grpc.pb import MessageType, Permission, d

__all__ = ["PERMISSION", "grpc_addresses", "masterless_write", "message_queues"]

PERMISSION: Final = {
    6: Permission.READ_WRITE,
    4: Permission.READ,
    2: Permission.WRITE,
    0: Permission.NONE,
}
"""Native permission bits (4 read, 2 write) as the v2 enum."""


def grpc_addresses(route: w.RouteResponse) -> dict[str, str]:
    """Each group's gRPC endpoint: the first broker the route lists with one (the master
    while the group has one, else a slave serving reads: docs/replication.md §5)."""
    addresses: dict[str, str] = {}
    for broker in route.brokers:
        if broker.grpc_address:
            addresses.setdefault(broker.name, broker.grpc_address)
    return addresses


def masterless_write(route: w.RouteResponse, own_group: str, topic_perm: int | None) -> int:
    """The write permission ``own_group`` had before the name server dropped it for want of a
    live master (0 otherwise). While a failover is under way the official clients keep the
    group's queues writable, pointed at this broker: their sends are refused until it is
    promoted, then go through without a route refresh (they refresh every 30 s at best, and a
    read-only route read in those seconds would strand them)."""
    if topic_perm is None or any(b.name == own_group and b.role == "master" for b in route.brokers):
        return 0
    return topic_perm & 2


def message_queues(
    route: w.RouteResponse, namespace: str, own_group: str, own_write: int
) -> list[Any]:
    """The v2 message queues of ``route`` (``own_write``: see :func:`masterless_write`)."""
    addresses = grpc_addresses(route)
    accepted = ACCEPTED_TYPES.get(route.topic_type, (MessageType.NORMAL,))
    resource = {"name": route.topic, "resource_namespace": namespace}
    return [
        d.MessageQueue(
            topic=resource,
            id=queue.queue_id,
            permission=PERMISSION[
                (queue.perm | (own_write if queue.broker_name == own_group else 0)) & 6
            ],
            broker={"name": queue.broker_name, "id": 0, "endpoints": endpoints(address)},
            accept_message_types=accepted,
        )
        for queue in route.queues
        if (address := addresses.get(queue.broker_name))
    ]
