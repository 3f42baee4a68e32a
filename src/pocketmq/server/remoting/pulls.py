"""``PULL_MESSAGE``: a push consumer's pull by queue offset, with long polling and tag filtering
(docs/remoting.md, "Pulls").

The request (``PullMessageRequestHeader``; served by RocketMQ's ``PullMessageProcessor``) names
the group, topic, queue and offset, how many messages at most, and in ``sysFlag``
(``PullSysFlag``) whether to commit the consumer's offset on the way (bit 0, with
``commitOffset``), whether the broker may hold the pull until a message arrives (bit 1, for up
to ``suspendTimeoutMillis``), and whether the request carries its subscription (bit 2,
``subscription``; otherwise the one the client heartbeated for the topic). Tags are filtered by
name (``TAG`` expressions; ``SQL92`` is refused). A pull that finds nothing new waits in the
broker's long poll (woken by a message arriving in the queue) as a task; the connection's close
cancels it.

The answer's four ext fields are always there (the Java client unboxes them):
``suggestWhichBrokerId`` (0: the master; the route's ids, docs/remoting.md "Name server"),
``nextBeginOffset``, ``minOffset``, ``maxOffset``; its code says what was found — ``SUCCESS``
with the records, ``PULL_NOT_FOUND`` (nothing new), ``PULL_RETRY_IMMEDIATELY`` (nothing matched
the tags: continue at ``nextBeginOffset``), ``PULL_OFFSET_MOVED`` (the offset is outside the
queue, or an operator reset it: continue at ``nextBeginOffset``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from pocketmq.broker import Broker, PullOutcome, PullStatus
from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol.remoting.codes import ResponseCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.remoting.clients import CONSUMER_GROUPS, keep_registered
from pocketmq.server.remoting.connection import RemotingConnection
from pocketmq.server.remoting.fields import number, optional_number, text
from pocketmq.server.remoting.outcomes import Reply
from pocketmq.server.remoting.records import stored_records

__all__ = ["COMMIT_OFFSET", "HAS_SUBSCRIPTION", "SUSPEND", "pull_handler"]

#: ``PullSysFlag`` bits.
COMMIT_OFFSET: Final = 1
SUSPEND: Final = 2
HAS_SUBSCRIPTION: Final = 4

_CODES: Final = {
    PullStatus.FOUND: ResponseCode.SUCCESS,
    PullStatus.NO_NEW_MESSAGE: ResponseCode.PULL_NOT_FOUND,
    PullStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    PullStatus.OFFSET_ILLEGAL: ResponseCode.PULL_OFFSET_MOVED,
    PullStatus.OFFSET_MOVED: ResponseCode.PULL_OFFSET_MOVED,
}

PullHandler = Callable[[RemotingConnection, RemotingCommand], "Reply | Awaitable[Reply]"]


def _expression(conn: RemotingConnection, request: RemotingCommand, group: str, topic: str) -> str:
    """The pull's tag expression: its own, or the one heartbeated for the topic."""
    kind = request.ext_fields.get("expressionType") or "TAG"
    if kind != "TAG":
        raise InvalidArgumentError(
            f"expression type {kind!r} is not supported: pocketmq filters by tags only"
        )
    sys_flag = number(request, "sysFlag")
    given = request.ext_fields.get("subscription")
    if sys_flag & HAS_SUBSCRIPTION and given is not None:
        return given or "*"
    groups: dict[str, dict[str, str]] = conn.state.get(CONSUMER_GROUPS, {})
    return groups.get(group, {}).get(topic, "*")


def pull_handler(broker: Broker, store_host: Callable[[], str]) -> PullHandler:
    """The ``PULL_MESSAGE`` handler for ``broker``; ``store_host`` is the broker's advertised
    address (what the records' store host, hence their ``offsetMsgId``, names)."""

    def answer(outcome: PullOutcome) -> Reply:
        code = _CODES.get(outcome.status, ResponseCode.PULL_OFFSET_MOVED)
        next_offset, body = outcome.next_offset, b""
        if outcome.status == PullStatus.FOUND:
            body, count = stored_records(outcome.messages, store_host())
            if count < len(outcome.messages):  # the rest next time
                next_offset = outcome.messages[count].queue_offset
        fields = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(next_offset),
            "minOffset": str(outcome.min_offset),
            "maxOffset": str(outcome.max_offset),
        }
        return Reply(code, fields, body)

    def pull(conn: RemotingConnection, request: RemotingCommand) -> Reply | Awaitable[Reply]:
        group = text(request, "consumerGroup")
        topic = text(request, "topic")
        queue_id = number(request, "queueId")
        offset = number(request, "queueOffset")
        max_count = number(request, "maxMsgNums")
        sys_flag = number(request, "sysFlag")
        expression = _expression(conn, request, group, topic)
        keep_registered(broker, conn)
        commit = optional_number(request, "commitOffset", -1)
        if sys_flag & COMMIT_OFFSET and commit >= 0:
            broker.commit_offsets(group, [(topic, queue_id, commit)])
        found = broker.pull_now(
            group, topic, queue_id, offset, max_count=max_count, expression=expression
        )
        if found is not None:
            return answer(found)
        wait = 0.0  # no long poll: one more look
        if sys_flag & SUSPEND:
            wait = optional_number(request, "suspendTimeoutMillis", 0) / 1000
        pending = broker.pull(
            group,
            topic,
            queue_id,
            offset,
            max_count=max_count,
            expression=expression,
            max_wait=max(0.0, wait),
        )
        return answered(pending)

    async def answered(pending: Awaitable[PullOutcome]) -> Reply:
        return answer(await pending)

    return pull
