"""Calling the application's listener, and turning whatever it does into a verdict.

The code is in :mod:`pocketmq.client.consumer._listener`; this module exports
its compiled twin when the build made one from the same sources and ``POCKETMQ_NO_EXTENSIONS``
is not set, else the pure module (docs/design.md "Compiled hot paths").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["ListenerCall", "Verdict"]

if TYPE_CHECKING:
    from pocketmq.client.consumer._listener import ListenerCall, Verdict
else:
    _implementation = load("pocketmq.client.consumer._listener")
    ListenerCall = _implementation.ListenerCall
    Verdict = _implementation.Verdict
