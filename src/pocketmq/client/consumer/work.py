"""The push consumer"s work queue: batches waiting for a worker.

The code is in :mod:`pocketmq.client.consumer._work`; this module exports
its compiled twin when the build made one from the same sources and ``POCKETMQ_NO_EXTENSIONS``
is not set, else the pure module (docs/design.md "Compiled hot paths").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["WorkQueue"]

if TYPE_CHECKING:
    from pocketmq.client.consumer._work import WorkQueue
else:
    _implementation = load("pocketmq.client.consumer._work")
    WorkQueue = _implementation.WorkQueue
