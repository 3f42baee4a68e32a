"""Responses that grow with the data must still fit in one frame.

A frame body is at most 16 MiB (docs/protocol.md "Limits"). A response over it used to drop the
connection and every request pipelined on it; now what grows with the data is cut to a byte
budget and the client asks for the rest (``QUERY_MESSAGE``'s ``skip``/``more``; pulls and pops
simply continue from where the last one stopped). The connection still answers
``MESSAGE_TOO_LARGE`` should any response overflow regardless.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pocketmq.protocol import MAX_FRAME_BODY
from pocketmq.protocol import structs as w
from pocketmq.protocol.limits import MAX_QUERY_RESULTS

__all__ = [
    "MAX_QUERY_RESULTS",
    "MAX_REDRIVE_OFFSETS",
    "RESPONSE_BUDGET",
    "RESPONSE_MARGIN",
    "fit",
    "message_limit_problem",
    "pop_byte_budget",
    "wire_size",
]

# room for a response's own fields and its list header, beside the messages
RESPONSE_MARGIN: Final = 256 * 1024
RESPONSE_BUDGET: Final = MAX_FRAME_BODY - RESPONSE_MARGIN
# a REDRIVE answers one item per offset
MAX_REDRIVE_OFFSETS: Final = 10_000
# MessagePack framing of a Delivered beside its strings and body: the array header,
# eight integers of at most 9 bytes, and up to 5 bytes of length prefix per string or body
_MESSAGE_OVERHEAD: Final = 128


def _text(value: str) -> int:
    """An upper bound of the UTF-8 size of ``value`` (4 bytes per character unless ASCII)."""
    return len(value) if value.isascii() else 4 * len(value)


def wire_size(message: w.Delivered) -> int:
    """An upper bound of the message's encoded size."""
    size = _MESSAGE_OVERHEAD + len(message.body) + _text(message.topic)
    size += _text(message.receipt_handle) + _text(message.born_host) + _text(message.broker_name)
    for key, value in message.properties.items():
        size += _text(key) + _text(value) + 10
    return size


def pop_byte_budget(max_message_size: int, max_properties_size: int) -> int:
    """The soft byte bound to give a pop (the broker takes the message that reaches it, so room
    for one more message of the largest size is kept)."""
    largest = max_message_size + 4 * max_properties_size + _MESSAGE_OVERHEAD
    return max(1, RESPONSE_BUDGET - largest)


def message_limit_problem(max_message_size: int, max_properties_size: int) -> str | None:
    """Why messages of the configured maximum size could not be delivered, or None: one
    message with its properties must fit in a response."""
    beside_body = 4 * max_properties_size + _MESSAGE_OVERHEAD + 4096
    if max_message_size + beside_body > RESPONSE_BUDGET:
        return (
            f"max_message_size {max_message_size} with max_properties_size "
            f"{max_properties_size} would not fit in a {MAX_FRAME_BODY}-byte frame when "
            f"delivered; keep max_message_size at most {RESPONSE_BUDGET - beside_body}"
        )
    return None


def fit(messages: Sequence[w.Delivered], budget: int) -> list[w.Delivered]:
    """The longest prefix of ``messages`` whose encoding fits in ``budget`` bytes (the first
    message always: the broker's size limits keep one message within a frame)."""
    total = 0
    for count, message in enumerate(messages):
        total += wire_size(message)
        if total > budget and count:
            return list(messages[:count])
    return list(messages)
