"""Messages the broker delivers, as the stored records a remoting client reads
(docs/remoting.md, "Stored messages"): a pull's body, and the other answers that carry
messages.

A delivered message becomes RocketMQ's ``MessageExt`` as the commit log holds it: its physical
offset is the commit-log offset (so the ``offsetMsgId`` a client computes from the record and
the store host names it), reconsume times are the delivery attempt − 1, and the store host is
the broker's advertised address. Properties keep their names, but the transaction id, which
RocketMQ spells ``__transactionId__``. Bodies travel uncompressed (sysFlag 0): pocketmq stores
them plain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pocketmq import properties as props
from pocketmq.broker import Delivered
from pocketmq.protocol.remoting.properties import TRANSACTION_ID
from pocketmq.protocol.remoting.stored import StoredMessage, encode_stored

__all__ = ["RESPONSE_BUDGET", "stored_record", "stored_records"]

#: The bytes of records one answer carries at most (the frame limit is 16 MiB): past it a pull
#: answers the records before, and the client pulls the rest next (``nextBeginOffset``).
RESPONSE_BUDGET: Final = 8 * 1024 * 1024


def stored_record(message: Delivered, store_host: str) -> StoredMessage:
    """One delivered message as a stored record (module doc)."""
    properties = message.properties
    if props.TRANSACTION_ID in properties:
        properties = dict(properties)
        properties[TRANSACTION_ID] = properties.pop(props.TRANSACTION_ID)
    return StoredMessage(
        topic=message.topic,
        body=message.body,
        properties=properties,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        commit_log_offset=message.physical_offset,
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        store_timestamp=message.store_timestamp,
        store_host=store_host,
        reconsume_times=max(0, message.delivery_attempt - 1),
    )


def stored_records(
    messages: Sequence[Delivered], store_host: str, budget: int = RESPONSE_BUDGET
) -> tuple[bytes, int]:
    """The records of ``messages`` in order, as many as fit in ``budget`` bytes (at least one);
    returns the body and how many messages it holds."""
    parts: list[bytes] = []
    size = 0
    for message in messages:
        record = encode_stored([stored_record(message, store_host)])
        if parts and size + len(record) > budget:
            break
        parts.append(record)
        size += len(record)
    return b"".join(parts), len(parts)
