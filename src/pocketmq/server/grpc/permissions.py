"""What each RocketMQ 5 gRPC call needs from the ACL, read from its request as the official
clients send it (docs/security.md, "Authorization"): the same rules as the native protocol's
(server/native/permissions.py) — sending needs ``Pub`` on the topic, receiving and acknowledging
``Sub`` on the group and the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pocketmq.server.auth.acl import Action
from pocketmq.server.auth.authorizer import Need, topic_need

__all__ = ["needs"]


def _sub(request: Any) -> list[Need]:
    topic = request.message_queue.topic.name if request.HasField("message_queue") else ""
    if not topic and hasattr(request, "topic"):
        topic = request.topic.name
    found: list[Need] = [("Group", request.group.name, Action.SUB)]
    return [*found, topic_need(topic, Action.SUB)] if topic else found


def _send(request: Any) -> list[Need]:
    return [topic_need(t, Action.PUB) for t in {m.topic.name for m in request.messages}]


def _named_group(request: Any) -> list[Need]:
    """Heartbeat and NotifyClientTermination: ``Sub`` on the group when one is named."""
    if request.HasField("group") and request.group.name:
        return [("Group", request.group.name, Action.SUB)]
    return []


def _queue_bounds(request: Any) -> list[Need]:
    """QueryOffset names a queue and no group: a consumer's ``Sub`` on the topic."""
    return [topic_need(request.message_queue.topic.name, Action.SUB)]


def _group_and_topic(request: Any) -> list[Need]:
    return [
        ("Group", request.group.name, Action.SUB),
        topic_need(request.topic.name, Action.SUB),
    ]


_NEEDS: dict[str, Callable[[Any], list[Need]]] = {
    "SendMessage": _send,
    "RecallMessage": lambda r: [topic_need(r.topic.name, Action.PUB)],
    "EndTransaction": lambda r: [topic_need(r.topic.name, Action.PUB)],
    "ReceiveMessage": _sub,
    "PullMessage": _sub,
    "UpdateOffset": _sub,
    "GetOffset": _sub,
    "QueryOffset": _queue_bounds,
    "AckMessage": _group_and_topic,
    "ChangeInvisibleDuration": _group_and_topic,
    "ForwardMessageToDeadLetterQueue": _group_and_topic,
    "QueryAssignment": _group_and_topic,
    "Heartbeat": _named_group,
    "NotifyClientTermination": _named_group,
}


def needs(method: str, request: Any) -> list[Need]:
    """What a call of ``method`` (the full gRPC path or its last part) needs; [] for route
    queries and Telemetry, which any authenticated client may make (a Telemetry stream's
    settings are checked by the adapter: server/grpc/guard.py)."""
    find = _NEEDS.get(method.rsplit("/", 1)[-1])
    return find(request) if find is not None else []
