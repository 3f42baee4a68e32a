"""Reliability backends: ``memory`` (always available), ``sql`` (SQLAlchemy) and ``redis`` (leases).

:func:`open_backend` picks one from a URL, so that a command line option or a configuration
value can choose between a test double and a real database without code changes.
"""

from __future__ import annotations

from typing import Any

from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.clock import SYSTEM_CLOCK, Clock
from pocketmq.reliability.database_url import is_memory_url

__all__ = ["open_backend"]


def open_backend(
    url: str, *, table_prefix: str = "", clock: Clock = SYSTEM_CLOCK, **options: Any
) -> ReliabilityBackend[Any]:
    """A backend for ``url``: ``memory://`` or a database URL (see ``SqlBackend.from_url``,
    which receives ``options``: ``schema``, ``stub_table``, ``log_table``, engine options)."""
    if is_memory_url(url):
        from pocketmq.reliability.backends.memory import MemoryBackend

        return MemoryBackend(clock=clock)
    from pocketmq.reliability.backends.sql import SqlBackend

    return SqlBackend.from_url(url, table_prefix=table_prefix, clock=clock, **options)
