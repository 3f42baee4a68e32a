"""One delivery attempt of a message: who got it, when, and how it ended.

The same value is a record of the broker's attempt history (broker/history.py, docs/
storage-format.md "The attempt history"), what a consumer reports and what ``pocketmq message
history`` reads back over the native protocol: a MessagePack array, so none of them copies it.
"""

from __future__ import annotations

import msgspec

__all__ = ["Attempt"]


class Attempt(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One attempt (module doc), so an operator can see why a message was retried or
    dead-lettered; new fields go last with a default so records written before them still
    decode."""

    message_id: str
    group: str
    topic: str
    attempt: int
    consumer: str
    outcome: str
    error: str
    delivered_at: int  # epoch ms
    finished_at: int  # epoch ms
    message_group: str = ""  # FIFO group ("" for normal messages); last, so old records decode
