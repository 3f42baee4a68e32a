"""A delivered message as applications see it (:func:`to_view`, exported by
:mod:`pocketmq.client.convert`).

Built once for every message a consumer receives, so it is compiled with the push consumer's
path (docs/design.md, "Compiled hot paths"); it takes nothing but a wire ``Delivered``,
which a compiled signature checks.
"""

from __future__ import annotations

from pocketmq import properties as props
from pocketmq.client.message import MessageView
from pocketmq.protocol import structs as w

__all__ = ["to_view"]

SYSTEM_PROPERTIES = props.SYSTEM_PROPERTIES


def to_view(message: w.Delivered) -> MessageView:
    """A delivered message as applications see it: the original topic of a retry, system
    properties hidden.
    """
    properties = message.properties
    topic = message.topic
    if topic.startswith("%RETRY%"):
        topic = properties.get(props.RETRY_TOPIC, topic)
    keys = properties.get(props.KEYS)
    return MessageView(
        message_id=properties.get(props.MESSAGE_ID, ""),
        topic=topic,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        body=message.body,
        tag=properties.get(props.TAGS) or None,
        keys=tuple(keys.split()) if keys else (),
        properties={k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES},
        message_group=properties.get(props.MESSAGE_GROUP) or None,
        delivery_attempt=message.delivery_attempt,
        born_timestamp=message.born_timestamp,
        store_timestamp=message.store_timestamp,
        broker_name=message.broker_name,
        receipt_handle=message.receipt_handle or None,
    )
