"""A process queue: what a push consumer holds of one broker queue it owns.

The code is in :mod:`pocketmq.client.consumer._process_queue`; this module exports
its compiled twin when the build made one from the same sources and ``POCKETMQ_NO_EXTENSIONS``
is not set, else the pure module (docs/design.md "Compiled hot paths").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["ProcessQueue"]

if TYPE_CHECKING:
    from pocketmq.client.consumer._process_queue import ProcessQueue
else:
    _implementation = load("pocketmq.client.consumer._process_queue")
    ProcessQueue = _implementation.ProcessQueue
