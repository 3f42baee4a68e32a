"""Concurrent consumption: workers call the listener with batches, in any order.

The code is in :mod:`pocketmq.client.consumer._concurrent`; this module exports
its compiled twin when the build made one from the same sources and ``POCKETMQ_NO_EXTENSIONS``
is not set, else the pure module (docs/design.md "Compiled hot paths").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["ConcurrentConsumer"]

if TYPE_CHECKING:
    from pocketmq.client.consumer._concurrent import ConcurrentConsumer
else:
    _implementation = load("pocketmq.client.consumer._concurrent")
    ConcurrentConsumer = _implementation.ConcurrentConsumer
