"""Reliability backends: ``memory`` (always available), ``sql`` (SQLAlchemy) and ``redis`` (leases).

:func:`open_backend` picks one from a URL: ``memory://`` or any SQLAlchemy database URL.
"""

from __future__ import annotations

from typing import Any

from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock

__all__ = ["open_backend"]


def open_backend(
    url: str, *, table_prefix: str = "", clock: Clock = SYSTEM_CLOCK, **engine_options: Any
) -> ReliabilityBackend[Any]:
    """A backend for ``url``: ``memory://`` or a database URL (see ``SqlBackend.from_url``)."""
    if url.startswith("memory:"):
        from pocketmq.reliability.backends.memory import MemoryBackend

        return MemoryBackend(clock=clock)
    from pocketmq.reliability.backends.sql import SqlBackend

    return SqlBackend.from_url(url, table_prefix=table_prefix, clock=clock, **engine_options)
