"""The commit log: fixed-size segment files holding every record back to back.

The code is in the private module ``_commitlog``, compiled by the build with ``_consumequeue``
as one group (docs/design.md, "Compiled hot paths"); this module exports the
compiled twin when it was built from the same sources and ``POCKETMQ_NO_EXTENSIONS`` is not
set, else the pure module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["CommitLog", "Damage", "Segment", "segment_name"]

if TYPE_CHECKING:
    from pocketmq.store._commitlog import CommitLog, Damage, Segment, segment_name
else:
    _impl = load("pocketmq.store._commitlog")
    CommitLog, Damage, Segment = _impl.CommitLog, _impl.Damage, _impl.Segment
    segment_name = _impl.segment_name
