"""What each consumer-side remoting request needs from the ACL (docs/security.md,
"Authorization"; docs/remoting.md, "Broker, consumer side"), as the native port asks it
(``server/native/permissions.py``): consuming needs ``Sub`` on the group and on the topics it
reads — a retry topic counts as its group — so a signed user may pull, commit, send back, lock
and list the members of a group only with the rules a native or gRPC consumer of that group
would need. Queue positions (``GET_MAX_OFFSET``, ...) need ``Sub`` on the topic.

The check runs before the handler, on the user who signed the request (``conn.user``), with
the producer side's and administration's needs (``permissions.py``); a refusal is
``NO_PERMISSION``, counted as a forbidden request of the remoting protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pocketmq.protocol.remoting.bodies import HeartbeatData, LockBatchRequest, decode_json_body
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.auth.acl import Action
from pocketmq.server.auth.authorizer import Need, topic_need

__all__ = ["CONSUMER_CODES", "consumer_needs"]


def _consume(group: str, topics: set[str]) -> list[Need]:
    return [("Group", group, Action.SUB), *(topic_need(t, Action.SUB) for t in sorted(topics))]


def _field(request: RemotingCommand, name: str) -> str:
    return request.ext_fields.get(name, "")


def _heartbeat(request: RemotingCommand) -> list[Need]:
    needs: list[Need] = []
    for consumer in decode_json_body(request.body, HeartbeatData).consumer_data_set:
        topics = {s.topic for s in consumer.subscription_data_set}
        needs += _consume(consumer.group_name, topics)
    return needs


def _locks(request: RemotingCommand) -> list[Need]:
    body = decode_json_body(request.body, LockBatchRequest)  # the unlock body has its fields
    return _consume(body.consumer_group, {q.topic for q in body.mq_set})


def _group_topic(request: RemotingCommand) -> list[Need]:
    return _consume(_field(request, "consumerGroup"), {_field(request, "topic")})


def _topic(request: RemotingCommand) -> list[Need]:
    return [topic_need(_field(request, "topic"), Action.SUB)]


def _group_only(name: str) -> Callable[[RemotingCommand], list[Need]]:
    return lambda request: [("Group", _field(request, name), Action.SUB)]


def _unregister(request: RemotingCommand) -> list[Need]:
    group = _field(request, "consumerGroup")
    return [("Group", group, Action.SUB)] if group else []


_NEEDS: Final[dict[int, Callable[[RemotingCommand], list[Need]]]] = {
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_only("consumerGroup"),
    RequestCode.PULL_MESSAGE: _group_topic,
    RequestCode.QUERY_CONSUMER_OFFSET: _group_topic,
    RequestCode.UPDATE_CONSUMER_OFFSET: _group_topic,
    RequestCode.GET_MAX_OFFSET: _topic,
    RequestCode.GET_MIN_OFFSET: _topic,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic,
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic,
    RequestCode.CONSUMER_SEND_MSG_BACK: _group_only("group"),
    RequestCode.LOCK_BATCH_MQ: _locks,
    RequestCode.UNLOCK_BATCH_MQ: _locks,
}


#: The codes whose needs are the consumer side's.
CONSUMER_CODES: Final = frozenset(_NEEDS)


def consumer_needs(request: RemotingCommand) -> list[Need]:
    """What ``request`` needs (module doc); [] for a code not of the consumer side."""
    find = _NEEDS.get(request.code)
    return find(request) if find is not None else []
