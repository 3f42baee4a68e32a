"""The broker's producer-side remoting requests: ``SEND_MESSAGE`` (10), ``SEND_MESSAGE_V2``
(310) and ``SEND_BATCH_MESSAGE`` (320) (docs/remoting.md, "Broker, producer side").

A send's header names the topic, the queue the client chose, ``sysFlag`` (compressed body,
transaction type), the producer's ``flag`` and the properties string; the body is the message
(or, for a batch, RocketMQ's batch encoding). They become the broker's wire-neutral
:class:`~pocketmq.model.InboundMessage`: compressed bodies are inflated (bounded by the
broker's ``max_message_size``), a half message is marked ``TRAN_MSG``, the delivery times of
ali-ons and RocketMQ 5 (``__STARTDELIVERTIME``, ``TIMER_*``) become ``DELIVER_TIME_MS`` and the
producer's transaction id is dropped (the broker assigns its own). The sends one read of a
connection brought reach the store in one append (:class:`Joined`), as native sends do.

The answer carries the ``offsetMsgId`` of where the message was stored (``msgId``), its queue
and queue offset, the broker's transaction id for a half message, and the two fields the Java
client reads unconditionally (``MSG_REGION``, ``TRACE_ON``); a weaker store guarantee is
answered with its own code (10, 11, 12) and the same fields.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final, NamedTuple

from pocketmq import properties as props
from pocketmq.broker.topics import RETRY_PREFIX
from pocketmq.errors import MessageIllegalError, PocketMQError
from pocketmq.model import InboundMessage, SendBatch, SendOutcome
from pocketmq.protocol.remoting.batch import decode_batch
from pocketmq.protocol.remoting.codes import RequestCode, ResponseCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.protocol.remoting.msgid import encode_offset_msg_id
from pocketmq.protocol.remoting.properties import (
    START_DELIVER_TIME,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TRANSACTION_ID,
    decode_properties,
)
from pocketmq.protocol.remoting.sysflag import (
    COMPRESSED,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED,
    inflate_body,
)
from pocketmq.server.remoting import fields as f
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.outcomes import Joined, Reply, code_of

__all__ = ["SendHeader", "inbound_properties", "produce_handlers", "send_header"]


class _Names(NamedTuple):
    producer_group: str
    topic: str
    queue_id: str
    sys_flag: str
    born_timestamp: str
    flag: str
    properties: str
    reconsume_times: str
    max_reconsume_times: str


#: ``SendMessageRequestHeader``'s names, and ``SendMessageRequestHeaderV2``'s one-letter ones
#: (docs/remoting.md, "Request codes").
_LONG_NAMES: Final = _Names(
    "producerGroup",
    "topic",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "maxReconsumeTimes",
)
_V2_NAMES: Final = _Names("a", "b", "e", "f", "g", "h", "i", "j", "l")
#: The two low bits of a native record's flags are its transaction type (docs/protocol.md):
#: a remoting producer's ``flag`` keeps its other bits.
_NATIVE_TX_BITS: Final = 0b11
#: Send codes that mean "stored" (with a weaker guarantee for 10, 11, 12): answered with fields.
_STORED_CODES: Final = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
    }
)
#: RocketMQ 4.x's region name when the broker sets none (``MixAll.DEFAULT_TRACE_REGION_ID``).
_REGION: Final = "DefaultRegion"


class SendHeader(NamedTuple):
    """A send request's header, whichever of the two spellings it came in."""

    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int | None
    max_reconsume_times: int | None


def send_header(request: RemotingCommand) -> SendHeader:
    """The header of a ``SEND_MESSAGE`` (long names) or ``SEND_MESSAGE_V2``/
    ``SEND_BATCH_MESSAGE`` (one-letter names) request."""
    fields = request.ext_fields
    names = _LONG_NAMES if request.code == RequestCode.SEND_MESSAGE else _V2_NAMES
    topic = fields.get(names.topic)
    if not topic:
        f.text(request, names.topic)  # raises naming the field
        raise f.HeaderFieldError(f"the request header's field {names.topic!r} is empty")
    try:  # the hot path: each field read once, numbers parsed without a helper per field
        return SendHeader(
            fields.get(names.producer_group, ""),
            topic,
            int(fields.get(names.queue_id) or -1),
            int(fields.get(names.sys_flag) or 0),
            int(fields.get(names.born_timestamp) or 0),
            int(fields.get(names.flag) or 0),
            fields.get(names.properties, ""),
            _absent_or_number(request, names.reconsume_times),
            _absent_or_number(request, names.max_reconsume_times),
        )
    except ValueError:
        for name in (names.queue_id, names.sys_flag, names.born_timestamp, names.flag):
            f.optional_number(request, name, 0)  # raises naming the field that does not parse
        raise


def _absent_or_number(request: RemotingCommand, name: str) -> int | None:
    value = request.ext_fields.get(name)
    return None if value is None or value == "" else f.number(request, name)


def _delivery_time(properties: dict[str, str], now_ms: int) -> int | None:
    """The delivery time (epoch ms) the remoting-only properties ask for, popped from them."""
    due: int | None = None
    try:
        for name, offset in (
            (START_DELIVER_TIME, 0),
            (TIMER_DELIVER_MS, 0),
            (TIMER_DELAY_SEC, -1),
            (TIMER_DELAY_MS, -2),
        ):
            value = properties.pop(name, None)
            if value is None:
                continue
            number = int(value)
            due = number if offset == 0 else now_ms + (number * 1000 if offset == -1 else number)
    except ValueError:
        raise MessageIllegalError("a delivery-time property is not a number") from None
    return due


def inbound_properties(header: SendHeader, decoded: dict[str, str], now_ms: int) -> dict[str, str]:
    """A message's properties in the broker's terms (module doc); ``decoded`` are its own
    (the header's, or a batch message's), changed in place."""
    properties = decoded
    properties.pop(TRANSACTION_ID, None)  # the broker assigns the transaction id
    due = _delivery_time(properties, now_ms)
    if due is not None:
        properties[props.DELIVER_TIME_MS] = str(due)
    if header.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED:
        properties[props.TRANSACTION_PREPARED] = "true"
    if header.topic.startswith(RETRY_PREFIX):  # a consumer's fallback when its send-back failed
        if header.reconsume_times is not None:
            properties.setdefault(props.RECONSUME_TIMES, str(header.reconsume_times))
        if header.max_reconsume_times is not None:
            properties.setdefault(props.MAX_RECONSUME_TIMES, str(header.max_reconsume_times))
    return properties


class _Send(NamedTuple):
    batch: SendBatch
    store_host: str
    is_batch: bool


def produce_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """``SEND_MESSAGE``, ``SEND_MESSAGE_V2`` and ``SEND_BATCH_MESSAGE`` (module doc)."""
    broker = side.broker
    max_body = broker.config.store.max_message_size

    def messages_of(request: RemotingCommand, header: SendHeader) -> list[InboundMessage]:
        now_ms = int(time.time() * 1000)
        flag = header.flag & ~_NATIVE_TX_BITS
        if request.code == RequestCode.SEND_BATCH_MESSAGE:
            return [
                InboundMessage(
                    header.topic,
                    message.body,
                    inbound_properties(header, message.properties, now_ms),
                    header.queue_id,
                    message.flag & ~_NATIVE_TX_BITS,
                    header.born_timestamp,
                )
                for message in decode_batch(request.body, broker.config.max_batch_messages + 1)
            ]
        body = request.body
        if header.sys_flag & COMPRESSED:
            body = inflate_body(body, header.sys_flag, max_body)
        properties = inbound_properties(header, decode_properties(header.properties), now_ms)
        return [
            InboundMessage(
                header.topic, body, properties, header.queue_id, flag, header.born_timestamp
            )
        ]

    def send(conn: RemotingConnection, request: RemotingCommand) -> Joined:
        header = send_header(request)
        batch = SendBatch(messages_of(request, header), header.producer_group, conn.remote)
        store_host = side.store_host(conn.local_address or "127.0.0.1:0")
        is_batch = request.code == RequestCode.SEND_BATCH_MESSAGE
        return Joined(send_joined, _Send(batch, store_host, is_batch))

    async def settled(outcomes: list[SendOutcome], end: int, item: _Send) -> Reply:
        return send_reply(await broker.settle(outcomes, end), item)

    def send_joined(items: list[_Send]) -> list[object]:
        answers: list[object] = []
        for item, answer in zip(
            items, broker.send_now_many([item.batch for item in items]), strict=True
        ):
            if isinstance(answer, PocketMQError):
                answers.append(answer)
            elif answer[1]:  # sync flush or replication: answer once the disk/slave has it
                answers.append(settled(answer[0], answer[1], item))
            else:
                answers.append(send_reply(answer[0], item))
        return answers

    return {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
    }


def send_reply(outcomes: Sequence[SendOutcome], item: _Send) -> Reply:
    """The response to one send request: the first refusal's code, or where each message was
    stored (module doc)."""
    for outcome in outcomes:
        code = code_of(outcome.code)
        if code not in _STORED_CODES:
            return Reply(code, remark=outcome.remark or f"send refused ({outcome.code})")
    first = outcomes[0]
    fields = {
        "msgId": ",".join(
            encode_offset_msg_id(item.store_host, outcome.physical_offset) for outcome in outcomes
        ),
        "queueId": str(first.queue_id),
        "queueOffset": str(first.queue_offset),
        "MSG_REGION": _REGION,
        "TRACE_ON": "true",
    }
    if first.transaction_id:
        fields["transactionId"] = first.transaction_id
    worst = max((code_of(o.code) for o in outcomes), default=ResponseCode.SUCCESS)
    return Reply(worst, fields, remark=(first.remark or None) if worst else None)
