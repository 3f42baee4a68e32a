"""The remoting clients' registrations (docs/remoting.md, "Clients and groups"): ``HEART_BEAT``,
``UNREGISTER_CLIENT``, ``GET_CONSUMER_LIST_BY_GROUP``, the broker's ``NOTIFY_CONSUMER_IDS_CHANGED``
and the orderly consumers' ``LOCK_BATCH_MQ``/``UNLOCK_BATCH_MQ``.

A heartbeat (``HeartbeatData``, apache/rocketmq ``remoting/.../heartbeat/HeartbeatData.java``;
processed by ``ClientManageProcessor.heartBeat``) registers its client id in each consumer group
it runs — the model, clustering or broadcasting, and the subscriptions by topic — and names its
producer groups. What it registered is kept on the connection (``conn.state``, keys below), so
the connection's close drops exactly that, as RocketMQ's ``ClientHousekeepingService`` does when
a channel goes. Whenever a group's membership changes the broker tells the group's other
members with a one-way ``NOTIFY_CONSUMER_IDS_CHANGED`` on their own connections, and they
rebalance at once (``ClientRemotingProcessor.notifyConsumerIdsChanged``).

``conn.state`` keys (shared with the producer side's handlers):

- ``"client_id"``: the client id of the connection's latest heartbeat;
- ``"consumer_groups"``: ``{group: {topic: expression}}`` as heartbeated;
- ``"producer_groups"``: ``set`` of the producer groups heartbeated — where a transaction's
  check-back for such a group can go (the producer side registers its check channel through
  the ``on_producers`` hook).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Final

from pocketmq.broker import Broker, ClientInfo, retry_topic
from pocketmq.errors import (
    BrokerConnectionError,
    NoPermissionError,
    PocketMQError,
    TopicNotFoundError,
)
from pocketmq.protocol.remoting.bodies import (
    ConsumerData,
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequest,
    LockBatchResponse,
    MessageQueue,
    UnlockBatchRequest,
    decode_json_body,
    encode_json_body,
)
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.fields import text
from pocketmq.server.remoting.outcomes import Reply

__all__ = [
    "CLIENT_ID",
    "CONSUMER_GROUPS",
    "PRODUCER_GROUPS",
    "ClientHandlers",
    "ProducerHook",
    "TopicsChanged",
    "drop_registrations",
    "keep_registered",
]

CLIENT_ID: Final = "client_id"
CONSUMER_GROUPS: Final = "consumer_groups"
PRODUCER_GROUPS: Final = "producer_groups"
_REFRESHED: Final = "consumers_refreshed"  # monotonic time of the last registration
_MODEL: Final = "consumer_models"  # {group: "clustering" | "broadcasting"}

#: How often a connected consumer's requests renew its registration, at most (seconds).
REFRESH_INTERVAL: Final = 5.0

TopicsChanged = Callable[[], Awaitable[None]]
"""Registers the broker's topics with its name server now (a heartbeat created a group, and
with it the group's retry topic, which its consumers ask the name server's route of)."""

ProducerHook = Callable[[RemotingConnection, str, list[str]], None]
"""Told of each heartbeat's producer groups (connection, client id, groups): the producer side
registers the check-back channel of transactional producers there."""

_MODELS: Final = {"BROADCASTING": "broadcasting", "CLUSTERING": "clustering"}


def _subscriptions(consumer: ConsumerData) -> dict[str, str]:
    """Topic → tag expression; RocketMQ's ``subString`` is ``*`` for everything."""
    return {s.topic: s.sub_string or "*" for s in consumer.subscription_data_set}


def _notifier(conn: RemotingConnection) -> Callable[[str], None]:
    def notify(group: str) -> None:
        with contextlib.suppress(BrokerConnectionError):  # gone: its close unregisters it
            conn.push(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})

    return notify


def drop_registrations(broker: Broker, conn: RemotingConnection) -> None:
    """The connection closed: its clients leave the groups they heartbeated on it (their queue
    locks released), so the others rebalance at once, and their producer registrations go."""
    client_id: str = conn.state.get(CLIENT_ID, "")
    if not client_id:
        return
    groups: dict[str, dict[str, str]] = conn.state.get(CONSUMER_GROUPS, {})
    if groups:
        broker.unregister(client_id, sorted(groups))
    producers: set[str] = conn.state.get(PRODUCER_GROUPS, set())
    if producers:
        broker.unregister_producer(client_id, sorted(producers), owner=conn)


def _routed(broker: Broker, topic: str) -> bool:
    try:
        broker.queue_status(topic)
    except TopicNotFoundError:
        return False
    return True


def keep_registered(broker: Broker, conn: RemotingConnection) -> None:
    """Renew the registrations of the connection's consumer (at most every
    :data:`REFRESH_INTERVAL`, or a third of ``consumer_expiry``): RocketMQ's clients heartbeat
    every 30 s and the broker forgets a consumer silent for ``consumer_expiry`` (30 s), so a
    consumer that is connected and pulling stays a member between its heartbeats, as
    RocketMQ's broker keeps a live channel's (its expiry is 120 s). Pulls call it; the
    connection's close still drops them at once."""
    refreshed = conn.state.get(_REFRESHED)
    if refreshed is None:
        return
    now = time.monotonic()
    if now - refreshed < min(REFRESH_INTERVAL, broker.config.consumer_expiry / 3):
        return
    conn.state[_REFRESHED] = now
    client_id: str = conn.state.get(CLIENT_ID, "")
    groups: dict[str, dict[str, str]] = conn.state.get(CONSUMER_GROUPS, {})
    model: dict[str, str] = conn.state.get(_MODEL, {})
    info = ClientInfo("remoting", conn.language, str(conn.version), conn.remote)
    for group, subscriptions in groups.items():
        with contextlib.suppress(PocketMQError):  # a group deleted since: the next heartbeat
            broker.heartbeat(
                client_id,
                [(group, model.get(group, "clustering"), subscriptions)],
                _notifier(conn),
                info,
            )


class ClientHandlers:
    """The registration handlers (module doc) for one broker, as RocketMQ's
    ``ClientManageProcessor`` serves them. With ``auto_create_groups`` a heartbeat may create its
    groups, and with them their retry topics: ``topics_changed`` then registers them with the
    name server before the heartbeat is answered, so the consumer finds ``%RETRY%<group>``'s
    route (as RocketMQ's broker creates it on a consumer's heartbeat)."""

    def __init__(
        self,
        broker: Broker,
        on_producers: ProducerHook | None = None,
        topics_changed: TopicsChanged | None = None,
    ) -> None:
        self._broker = broker
        self._on_producers = on_producers
        self._topics_changed = topics_changed

    def heartbeat(
        self, conn: RemotingConnection, request: RemotingCommand
    ) -> Reply | Awaitable[Reply]:
        """``HEART_BEAT``: register the client's consumer groups and producer groups; answered
        once the retry topics it created are registered with the name server."""
        data = decode_json_body(request.body, HeartbeatData)
        client_id = data.client_id
        previous = conn.state.get(CLIENT_ID)
        if previous and previous != client_id:
            drop_registrations(self._broker, conn)  # the connection now carries another client
            conn.state.pop(CONSUMER_GROUPS, None)
            conn.state.pop(PRODUCER_GROUPS, None)
        conn.state[CLIENT_ID] = client_id
        refused, created = self._register_consumers(conn, client_id, data.consumer_data_set)
        producers = [p.group_name for p in data.producer_data_set]
        if producers:
            conn.state.setdefault(PRODUCER_GROUPS, set()).update(producers)
            if self._on_producers is not None:
                self._on_producers(conn, client_id, producers)
        if refused is not None:
            raise refused
        if created and self._topics_changed is not None:
            return _registered(self._topics_changed)
        return Reply()

    def _register_consumers(
        self, conn: RemotingConnection, client_id: str, consumers: list[ConsumerData]
    ) -> tuple[PocketMQError | None, bool]:
        """Register ``client_id`` in each consumer group of a heartbeat (a group refused does not
        stop the others). Returns the first refusal and whether a retry topic was created."""
        broker = self._broker
        info = ClientInfo("remoting", conn.language, str(conn.version), conn.remote)
        registered: dict[str, dict[str, str]] = conn.state.setdefault(CONSUMER_GROUPS, {})
        refused: PocketMQError | None = None
        created = False
        for consumer in consumers:
            subscriptions = _subscriptions(consumer)
            model = _MODELS.get(consumer.message_model, "clustering")
            retry = retry_topic(consumer.group_name)
            new = broker.config.auto_create_groups and not _routed(broker, retry)
            try:
                broker.heartbeat(
                    client_id,
                    [(consumer.group_name, model, subscriptions)],
                    _notifier(conn),
                    info,
                )
            except PocketMQError as exc:  # the other groups still register
                refused = refused or exc
                continue
            registered[consumer.group_name] = subscriptions
            conn.state.setdefault(_MODEL, {})[consumer.group_name] = model
            conn.state[_REFRESHED] = time.monotonic()
            created = created or (new and _routed(broker, retry))
        return refused, created

    def unregister(self, conn: RemotingConnection, request: RemotingCommand) -> Reply:
        """``UNREGISTER_CLIENT``: a client leaves a consumer group or a producer group (with
        authentication, only the connection's own client)."""
        broker = self._broker
        client_id = text(request, "clientID")
        own = conn.state.get(CLIENT_ID, "")
        if conn.user and client_id != own:  # authentication on: a client leaves only itself
            raise NoPermissionError(f"client {own!r} may unregister only itself, not {client_id!r}")
        consumer_group = request.ext_fields.get("consumerGroup", "")
        if consumer_group:
            broker.unregister(client_id, [consumer_group])
            if client_id == own:
                conn.state.get(CONSUMER_GROUPS, {}).pop(consumer_group, None)
        producer_group = request.ext_fields.get("producerGroup", "")
        if producer_group:
            broker.unregister_producer(client_id, [producer_group], owner=conn)
            if client_id == own:
                conn.state.get(PRODUCER_GROUPS, set()).discard(producer_group)
        return Reply()

    def consumer_list(self, conn: RemotingConnection, request: RemotingCommand) -> Reply:
        """``GET_CONSUMER_LIST_BY_GROUP``: the client ids of a group, for a client's rebalance."""
        ids = self._broker.consumer_ids(text(request, "consumerGroup"))
        return Reply(body=encode_json_body(ConsumerListBody(ids)))

    def lock(self, conn: RemotingConnection, request: RemotingCommand) -> Reply:
        """``LOCK_BATCH_MQ``: an orderly consumer locks its queues; the answer lists those it
        holds now."""
        body = decode_json_body(request.body, LockBatchRequest)
        held = self._broker.lock_queues(
            body.consumer_group, body.client_id, [(q.topic, q.queue_id) for q in body.mq_set]
        )
        granted = set(held)
        answer = [q for q in body.mq_set if (q.topic, q.queue_id) in granted]
        return Reply(body=encode_json_body(LockBatchResponse(_dedupe(answer))))

    def unlock(self, conn: RemotingConnection, request: RemotingCommand) -> Reply:
        """``UNLOCK_BATCH_MQ``: an orderly consumer lets its queues go (a rebalance moved them)."""
        body = decode_json_body(request.body, UnlockBatchRequest)
        self._broker.unlock_queues(
            body.consumer_group, body.client_id, [(q.topic, q.queue_id) for q in body.mq_set]
        )
        return Reply()

    def table(self) -> RemotingHandlerTable:
        """The family's request codes and their handlers."""
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.LOCK_BATCH_MQ: self.lock,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock,
        }


async def _registered(topics_changed: TopicsChanged) -> Reply:
    await topics_changed()
    return Reply()


def _dedupe(queues: list[MessageQueue]) -> list[MessageQueue]:
    seen: set[tuple[str, str, int]] = set()
    unique = []
    for queue in queues:
        key = (queue.topic, queue.broker_name, queue.queue_id)
        if key not in seen:
            seen.add(key)
            unique.append(queue)
    return unique
