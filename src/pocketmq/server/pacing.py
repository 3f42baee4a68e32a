"""How a server connection paces its reading (docs/protocol.md, "Limits"), shared by the native
and the remoting connection: it stops reading a client that reads its answers slower than they
are written (``pause_writing``), and after a large read it lets the loop's other work run a turn
before reading more (``YIELD_AFTER_BYTES``), so one pipelining client cannot hold the loop."""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["YIELD_AFTER_BYTES", "PacedReading"]

YIELD_AFTER_BYTES: Final = 65536
"""A read at least this large is followed by a pause until the loop's next turn."""


class PacedReading(asyncio.Protocol):
    """The reading half of a server connection's flow control; a subclass sets ``_transport``
    when connected and ``closed`` when done, and calls :meth:`_yield_turn` after a large read."""

    _transport: asyncio.Transport | None
    closed: bool
    _paused: bool = False  # by pause_writing: the client reads slower than we answer
    _yielding: bool = False  # reading paused until the loop's next turn (YIELD_AFTER_BYTES)

    def pause_writing(self) -> None:
        """The client reads slower than we answer: stop reading its requests meanwhile."""
        self._paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        """The client caught up: read its requests again."""
        self._paused = False
        if self._transport is not None and not self.closed and not self._yielding:
            self._transport.resume_reading()

    def _yield_turn(self) -> None:
        """Stop reading until the loop's next turn (see YIELD_AFTER_BYTES)."""
        if self._transport is None or self._yielding:
            return
        self._yielding = True
        self._transport.pause_reading()
        asyncio.get_running_loop().call_soon(self._end_yield)

    def _end_yield(self) -> None:
        self._yielding = False
        if self._transport is not None and not self.closed and not self._paused:
            self._transport.resume_reading()
