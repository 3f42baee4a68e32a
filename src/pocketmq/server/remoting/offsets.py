"""The remoting requests about positions in a queue (docs/remoting.md, "Offsets"):
``QUERY_CONSUMER_OFFSET``, ``UPDATE_CONSUMER_OFFSET`` (often one-way), ``GET_MAX_OFFSET``,
``GET_MIN_OFFSET``, ``SEARCH_OFFSET_BY_TIMESTAMP`` and ``GET_EARLIEST_MSG_STORETIME``
(``ConsumerManageProcessor``, ``AdminBrokerProcessor`` in apache/rocketmq; headers
``QueryConsumerOffsetRequestHeader``, ``UpdateConsumerOffsetRequestHeader``,
``GetMaxOffsetRequestHeader``, ``GetMinOffsetRequestHeader``, ``SearchOffsetRequestHeader``,
``GetEarliestMsgStoretimeRequestHeader``).

A group without a committed offset on a queue is answered where the group starts (its
``consume_from``, the same on every protocol) with ``SUCCESS``, not ``QUERY_NOT_FOUND``: the
client then starts there instead of at its own ``consumeFromWhere`` — as RocketMQ's broker
answers 0 for a queue whose first message is still at hand.
"""

from __future__ import annotations

from pocketmq.broker import Broker
from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.fields import number, text
from pocketmq.server.remoting.outcomes import Reply

__all__ = ["offset_handlers"]


def _offset(value: int) -> Reply:
    return Reply(ext_fields={"offset": str(value)})


def offset_handlers(broker: Broker) -> RemotingHandlerTable:
    """The offset handlers (module doc) for ``broker``."""

    def bounds(topic: str, queue_id: int) -> tuple[int, int]:
        for queue, low, high, _committed in broker.queue_status(topic):
            if queue == queue_id:
                return low, high
        raise InvalidArgumentError(f"topic {topic!r} has no queue {queue_id}")

    def store_time(topic: str, queue_id: int, offset: int) -> int | None:
        found = broker.browse(topic, queue_id, offset, 1)
        return found[0].store_timestamp if found else None

    def query(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        return _offset(
            broker.query_offset(
                text(request, "consumerGroup"), text(request, "topic"), number(request, "queueId")
            )
        )

    def update(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        broker.commit_offsets(
            text(request, "consumerGroup"),
            [(text(request, "topic"), number(request, "queueId"), number(request, "commitOffset"))],
        )
        return Reply()

    def maximum(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        return _offset(bounds(text(request, "topic"), number(request, "queueId"))[1])

    def minimum(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        return _offset(bounds(text(request, "topic"), number(request, "queueId"))[0])

    def search(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        """The first offset stored at or after ``timestamp`` (the queue's end when none): store
        times only grow along a queue, so a binary search reads log2(n) messages."""
        topic, queue_id = text(request, "topic"), number(request, "queueId")
        at_ms = number(request, "timestamp")
        low, high = bounds(topic, queue_id)
        while low < high:
            middle = (low + high) // 2
            stored = store_time(topic, queue_id, middle)
            if stored is None or stored >= at_ms:
                high = middle
            else:
                low = middle + 1
        return _offset(low)

    def earliest(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        topic, queue_id = text(request, "topic"), number(request, "queueId")
        low, _high = bounds(topic, queue_id)
        stored = store_time(topic, queue_id, low)
        return Reply(ext_fields={"timestamp": str(-1 if stored is None else stored)})

    return {
        RequestCode.QUERY_CONSUMER_OFFSET: query,
        RequestCode.UPDATE_CONSUMER_OFFSET: update,
        RequestCode.GET_MAX_OFFSET: maximum,
        RequestCode.GET_MIN_OFFSET: minimum,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search,
        RequestCode.GET_EARLIEST_MSG_STORETIME: earliest,
    }
