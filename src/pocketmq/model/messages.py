"""Messages and the outcomes of sending and pulling them: what producers hand to a broker, what it
hands to consumers, whichever protocol brought or takes them.

The message values are MessagePack arrays (``array_like``, as every native body: protocol/body.py)
so the native protocol carries them as they are: a SEND request's messages are decoded straight
into the :class:`InboundMessage` the broker stores, and a pull's :class:`Delivered` go out as the
broker made them. New fields go at the end with a default, so older peers keep working.
The gRPC adapter translates protobuf to and from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from pocketmq.errors import Code

__all__ = ["Delivered", "InboundMessage", "PullOutcome", "PullStatus", "SendBatch", "SendOutcome"]


class InboundMessage(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A message as a producer sends it and a protocol adapter hands it to the broker, in the
    broker's terms (id, tag, keys and hints are properties), whichever protocol brought it."""

    topic: str
    body: bytes
    properties: dict[str, str] = {}
    queue_id: int = -1
    flags: int = 0
    born_timestamp: int = 0


class SendBatch(NamedTuple):
    """One sender's batch as :meth:`Broker.send_now_many` takes it (what one SEND request
    carries)."""

    messages: Sequence[InboundMessage]
    producer_group: str = ""
    born_host: str = ""
    redrive: bool = False


class SendOutcome(msgspec.Struct, frozen=True, gc=False):
    """The broker's answer for one message of a send: a code, and where it was stored; a refused
    message names the send-contract rule it broke."""

    code: Code
    remark: str = ""
    message_id: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    physical_offset: int = -1
    transaction_id: str = ""
    topic: str = ""
    recall_handle: str = ""  # delayed messages: cancels the delivery (Broker.recall)
    rule: str = ""  # the send-contract rule a refused message broke (pocketmq.contract.Rule)


class Delivered(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A message as the broker hands it to any protocol adapter for delivery and a consumer
    receives it; ``broker_name`` is the broker that delivered it, where a native client acks it
    or sends it back."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    physical_offset: int
    delivery_attempt: int = 1
    receipt_handle: str = ""
    born_host: str = ""
    broker_name: str = ""


class PullStatus:
    """What a pull found, RocketMQ's names (plain strings on the wire)."""

    FOUND = "FOUND"
    NO_NEW_MESSAGE = "NO_NEW_MESSAGE"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"
    # an operator reset the group's offset (broker/resets.py): continue from ``next_offset``
    OFFSET_MOVED = "OFFSET_MOVED"


class PullOutcome(msgspec.Struct, frozen=True, gc=False):
    """A pull's messages and the offsets the consumer moves on with."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[Delivered] = []
