"""Consume queues: per (topic, queue) arrays of fixed-width entries pointing into the commit log
(docs/storage-format.md §2).

The code is in the private module ``_consumequeue``, compiled by the build with ``_commitlog``
as one group (docs/design.md, "Compiled hot paths": a lone send's per-request
store work, docs/benchmarks.md "Broker send path, the append's Python calls"); this module
exports the compiled twin when it was built from the same sources and
``POCKETMQ_NO_EXTENSIONS`` is not set, else the pure module. Faults are injected below it, in
the files layer (:mod:`pocketmq.store.files`), which stays pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["ENTRY", "ENTRY_SIZE", "GROW_MAX", "GROW_MIN", "HOLE_TAG", "ConsumeQueue"]

if TYPE_CHECKING:
    from pocketmq.store._consumequeue import (
        ENTRY,
        ENTRY_SIZE,
        GROW_MAX,
        GROW_MIN,
        HOLE_TAG,
        ConsumeQueue,
    )
else:
    _impl = load("pocketmq.store._consumequeue")
    ENTRY, ENTRY_SIZE, HOLE_TAG = _impl.ENTRY, _impl.ENTRY_SIZE, _impl.HOLE_TAG
    GROW_MAX, GROW_MIN = _impl.GROW_MAX, _impl.GROW_MIN
    ConsumeQueue = _impl.ConsumeQueue
