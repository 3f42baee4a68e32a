"""What the native server adds to the broker's values on their way out: a topic's listing form, and
the broker's name on a delivered message (the rest: pocketmq.protocol.convert)."""

from __future__ import annotations

import msgspec

from pocketmq.broker import TopicConfig
from pocketmq.model import Delivered
from pocketmq.protocol import structs as w
from pocketmq.protocol.convert import (
    group_from_spec,
    group_to_spec,
    send_results_to_wire,
    transaction_to_wire,
)

__all__ = [
    "group_from_spec",
    "group_to_spec",
    "send_results_to_wire",
    "to_wire",
    "topic_spec",
    "transaction_to_wire",
]


def topic_spec(topic: TopicConfig) -> w.TopicSpec:
    """A topic's definition as listings, registrations and topic updates carry it."""
    return w.TopicSpec(topic.name, topic.queues, topic.topic_type.value, topic.perm)


def to_wire(message: Delivered, broker_name: str) -> Delivered:
    """A delivered message as it goes out, with the broker's name so a client knows where to ack or
    send it back: the broker's own value when it carries the name already (pulls, pops and
    queries: broker/parts.py), a copy only when not (a transaction check)."""
    if message.broker_name == broker_name:
        return message
    return msgspec.structs.replace(message, broker_name=broker_name)
