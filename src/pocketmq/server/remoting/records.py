"""Messages the broker hands out, as RocketMQ's stored records (docs/remoting.md, "Stored
messages"): what ``CHECK_TRANSACTION_STATE``, ``VIEW_MESSAGE_BY_ID`` and ``QUERY_MESSAGE`` carry
(and ``PULL_MESSAGE``).

The broker's properties travel under RocketMQ's names: the transaction id is
``__transactionId__`` there (``MessageConst.PROPERTY_TRANSACTION_ID``), ``TRANSACTION_ID``
natively; the others are spelled alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pocketmq import properties as props
from pocketmq.broker.model import Delivered
from pocketmq.protocol.remoting.properties import TRANSACTION_ID
from pocketmq.protocol.remoting.stored import StoredMessage

__all__ = ["remoting_properties", "stored_record"]

_RENAMED: Final = {props.TRANSACTION_ID: TRANSACTION_ID}


def remoting_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The broker's properties under RocketMQ's names."""
    if not any(name in properties for name in _RENAMED):
        return dict(properties)
    return {_RENAMED.get(name, name): value for name, value in properties.items()}


def stored_record(message: Delivered, store_host: str, sys_flag: int = 0) -> StoredMessage:
    """``message`` as a stored record of the broker at ``store_host`` (``ip:port``): its
    commit-log offset is the record's physical offset, so the ``offsetMsgId`` a client computes
    from it names the record (docs/remoting.md, "Message ids")."""
    return StoredMessage(
        topic=message.topic,
        body=message.body,
        properties=remoting_properties(message.properties),
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        commit_log_offset=message.physical_offset,
        sys_flag=sys_flag,
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        store_timestamp=message.store_timestamp,
        store_host=store_host,
        reconsume_times=max(0, message.delivery_attempt - 1),
    )
