"""What one native-protocol client may cost the server: connections, time, buffered bytes.

Any TCP peer can connect before it has said who it is, so every resource a connection holds is
bounded (docs/semantics.md "Connections", docs/protocol.md "Limits"):

- **connections**: at most ``max_connections``; the next one is answered ``TOO_MANY_REQUESTS``
  and closed (not silently dropped);
- **the handshake** (HELLO, and AUTHENTICATE on a server with authentication): it must complete
  within ``hello_timeout`` of connecting; the frames accepted before it are small
  (``max_frame_before_hello``); at most ``max_pending_connections`` connections may be in it at
  once (past that, or when every slot is taken, the one waiting longest is closed to make room),
  so connections that never authenticate can neither lock users out nor fill the buffer budget;
- **idle time**: a connection that sent nothing for ``idle_timeout`` and waits for no answer is
  closed (the SDK closes its own idle connections sooner, see the HELLO reply);
- **memory**: the bytes held for frames still being received, across all connections, stay
  under ``max_buffered_bytes``; the request whose bytes would pass it is refused with
  ``TOO_MANY_REQUESTS`` and its remaining bytes are skipped — the connection stays usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol import MAX_FRAME_BEFORE_HELLO, MAX_FRAME_BODY

__all__ = [
    "DEFAULT_HELLO_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "BufferBudget",
    "ConnectionLimits",
]

DEFAULT_MAX_CONNECTIONS: Final = 4096
DEFAULT_HELLO_TIMEOUT: Final = 10.0
# RocketMQ's NettyServerConfig.serverChannelMaxIdleTimeSeconds
DEFAULT_IDLE_TIMEOUT: Final = 120.0
DEFAULT_MAX_BUFFERED_BYTES: Final = 128 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionLimits:
    """The bounds above; every value is a ``[server]`` setting of ``pocketmq serve``."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    hello_timeout: float = DEFAULT_HELLO_TIMEOUT
    max_frame_before_hello: int = MAX_FRAME_BEFORE_HELLO
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    # connections in their handshake at once; 0: a quarter of max_connections (pending_cap)
    max_pending_connections: int = 0

    @property
    def pending_cap(self) -> int:
        """How many connections may be in their handshake at once: ``max_pending_connections``,
        or by default a quarter of ``max_connections``, but no more than their small frames
        could buffer in the budget less one full frame (at least 16 all the same)."""
        if self.max_pending_connections:
            return self.max_pending_connections
        fits = (self.max_buffered_bytes - MAX_FRAME_BODY) // self.max_frame_before_hello
        return max(1, min(self.max_connections // 4, max(fits, 16)))

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise InvalidArgumentError("max_connections must be at least 1")
        if not 0 < self.hello_timeout < float("inf"):
            raise InvalidArgumentError("hello_timeout must be a positive number of seconds")
        if not 0 < self.idle_timeout < float("inf"):
            raise InvalidArgumentError("idle_timeout must be a positive number of seconds")
        if not 256 <= self.max_frame_before_hello <= MAX_FRAME_BODY:
            raise InvalidArgumentError(
                f"max_frame_before_hello must be between 256 and {MAX_FRAME_BODY} bytes"
            )
        if self.max_buffered_bytes < MAX_FRAME_BODY:
            # below one frame, the largest request could never be received at all
            raise InvalidArgumentError(
                f"max_buffered_bytes must be at least one frame ({MAX_FRAME_BODY} bytes)"
            )
        if self.max_pending_connections < 0:
            raise InvalidArgumentError("max_pending_connections must be 0 (the default) or more")
        held = self.max_pending_connections * self.max_frame_before_hello
        if held > self.max_buffered_bytes - MAX_FRAME_BODY:
            raise InvalidArgumentError(
                f"max_pending_connections {self.max_pending_connections} × max_frame_before_hello "
                f"{self.max_frame_before_hello} would let connections that never authenticate "
                f"hold more than max_buffered_bytes less one frame ({MAX_FRAME_BODY} bytes)"
            )


class BufferBudget:
    """The bytes all connections of a server hold for partly received frames."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def change(self, held_before: int, held_now: int) -> bool:
        """Account a connection's holding going from ``held_before`` to ``held_now`` bytes.

        False when it grew past the limit: the connection is then counted as holding nothing,
        and the caller must drop the frame it is receiving."""
        used = self.used - held_before + held_now
        if held_now > held_before and used > self.limit:
            self.used -= held_before
            return False
        self.used = used
        return True
