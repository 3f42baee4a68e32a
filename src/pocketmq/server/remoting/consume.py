"""The broker's remoting handlers for consumers (docs/remoting.md, "Broker, consumer side"), as
one table, and what a closing connection takes with it.

Registrations and locks are in :mod:`~pocketmq.server.remoting.clients`, pulls in
:mod:`~pocketmq.server.remoting.pulls`, offsets in :mod:`~pocketmq.server.remoting.offsets`;
here is ``CONSUMER_SEND_MSG_BACK`` (``ConsumerSendMsgBackRequestHeader``, served by RocketMQ's
``AbstractSendMessageProcessor.consumerSendMsgBack``): the message a consumer failed on, named by
its commit-log offset, is re-stored into ``%RETRY%<group>`` with the delay of its next attempt —
``delayLevel`` 0 lets the group's retry policy decide (by default delay level 3 + reconsume
times, seed 001), a positive one is that level — or into ``%DLQ%<group>`` once its reconsume
times reach ``maxReconsumeTimes`` (the request's, else the group's), or at once when
``delayLevel`` is negative. The attempt is recorded in the message's history
(docs/semantics.md, "Consumer retry, delays and dead letters").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pocketmq.broker import Broker
from pocketmq.errors import MessageNotFoundError
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.remoting.clients import (
    CLIENT_ID,
    ClientHandlers,
    ProducerHook,
    TopicsChanged,
    drop_registrations,
)
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.fields import number, optional_number, text
from pocketmq.server.remoting.offsets import offset_handlers
from pocketmq.server.remoting.outcomes import Reply
from pocketmq.server.remoting.pulls import pull_handler

__all__ = ["consumer_closed", "consumer_handlers"]


def consumer_handlers(
    broker: Broker,
    store_host: Callable[[], str],
    *,
    on_producers: ProducerHook | None = None,
    topics_changed: TopicsChanged | None = None,
) -> RemotingHandlerTable:
    """Every consumer-side handler for ``broker`` (module doc): register them in the broker's
    table with ``handlers |= consumer_handlers(...)``. ``store_host`` is the broker's advertised
    address; ``on_producers`` hears of each heartbeat's producer groups, ``topics_changed``
    registers a retry topic a heartbeat created (clients.py)."""

    def send_back(conn: RemotingConnection, request: RemotingCommand) -> Awaitable[Reply]:
        physical_offset = number(request, "offset")
        group = text(request, "group")
        delay_level = optional_number(request, "delayLevel", 0)
        max_reconsume_times = optional_number(request, "maxReconsumeTimes", -1)
        consumer = conn.state.get(CLIENT_ID, "")
        return _send_back(
            broker, group, physical_offset, delay_level, max_reconsume_times, consumer
        )

    table = ClientHandlers(broker, on_producers, topics_changed).table()
    table |= offset_handlers(broker)
    table[RequestCode.PULL_MESSAGE] = pull_handler(broker, store_host)
    table[RequestCode.CONSUMER_SEND_MSG_BACK] = send_back
    return table


async def _send_back(
    broker: Broker,
    group: str,
    physical_offset: int,
    delay_level: int,
    max_reconsume_times: int,
    consumer: str,
) -> Reply:
    # the client names the message by its offset; its id is the stored one (ali-ons sends the
    # offsetMsgId as originMsgId, Java the UNIQ_KEY)
    message_id = broker.message_id_at(physical_offset)
    if message_id is None:
        raise MessageNotFoundError(
            f"no message at commit-log offset {physical_offset} (removed by retention?)"
        )
    await broker.send_back(
        group,
        physical_offset,
        message_id,
        delay_level=delay_level,
        max_reconsume_times=max_reconsume_times,
        consumer=consumer,
    )
    return Reply()


def consumer_closed(broker: Broker) -> Callable[[RemotingConnection], None]:
    """The port's ``on_close`` for consumers: a closed connection's registrations go."""
    return lambda conn: drop_registrations(broker, conn)
