"""Message ids: unique, sortable by creation time, assigned once per message.

32 upper-case hex characters: 6 bytes of milliseconds since the epoch, 4 bytes identifying the
process (a random value chosen at import, mixed with the pid), 6 bytes of a per-process counter.
A producer assigns the id before the first attempt and keeps it across retries, so a consumer
can recognise a retried duplicate (seed 004).
"""

from __future__ import annotations

import itertools
import os
import threading
import time

__all__ = ["new_message_id"]

_PROCESS = (int.from_bytes(os.urandom(4), "big") ^ os.getpid()) & 0xFFFFFFFF
_counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
_lock = threading.Lock()


def new_message_id() -> str:
    with _lock:
        sequence = next(_counter) & 0xFFFFFFFFFFFF
    millis = int(time.time() * 1000) & 0xFFFFFFFFFFFF
    return f"{millis:012X}{_PROCESS:08X}{sequence:012X}"
