"""The append path: a batch of messages into the commit log, their queue entries and index keys.

The code is in the private module ``_writer``, compiled by the build with ``_consumequeue`` and
``_commitlog`` as one group (docs/design.md, "Compiled hot paths" and "The append path, two
shapes"); this module exports the compiled twin when it was built from the same sources and
``POCKETMQ_NO_EXTENSIONS`` is not set, else the pure module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["Writer"]

if TYPE_CHECKING:
    from pocketmq.store._writer import Writer
else:
    Writer = load("pocketmq.store._writer").Writer
