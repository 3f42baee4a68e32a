"""Message ids: unique, sortable by creation time, assigned once per message.

32 upper-case hex characters: 6 bytes of milliseconds since the epoch, 4 bytes identifying the
process (a random value chosen at import, mixed with the pid), 6 bytes of a per-process counter.
A producer assigns the id before the first attempt and keeps it across retries, so a consumer
can recognise a retried duplicate (docs/semantics.md, "Producer"). ``itertools.count`` is
atomic in CPython, so ids are unique across threads without a lock.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Final

__all__ = ["new_message_id"]

_PROCESS: Final = (int.from_bytes(os.urandom(4), "big") ^ os.getpid()) & 0xFFFFFFFF
_counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
_MASK: Final = 0xFFFFFFFFFFFF
_PROCESS_BITS: Final = _PROCESS << 48  # the process's 32 bits, above the counter's 48


def new_message_id(millis: int | None = None) -> str:
    """A fresh id for a message about to be sent: time first so ids sort by creation, then the
    process and a counter so two producers (or two threads) never collide; ``millis`` is the
    time now in epoch milliseconds when the caller read the clock already. The three fields are
    one 128-bit number, written out as bytes in hex (every send makes an id: a third of the
    instructions of formatting it with ``:032X``)."""
    if millis is None:
        millis = time.time_ns() // 1_000_000
    number = (millis & _MASK) << 80 | _PROCESS_BITS | next(_counter) & _MASK
    return number.to_bytes(16).hex().upper()
