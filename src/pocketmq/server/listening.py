"""One listening port, two protocols: what its connections share, and the sniffer that tells
which protocol a new connection speaks (docs/remoting.md, "Where it listens").

The broker's client port (10911) and the name server's (9876) serve pocketmq's native protocol
and RocketMQ's remoting protocol. Both protocols' clients speak first, so a new connection is
held by a :class:`ProtocolSniffer` until its first bytes say which it is
(:func:`pocketmq.protocol.remoting.sniff_protocol`, at most 13 bytes); the sniffer then hands
the transport to a connection of that protocol (``transport.set_protocol``), which from then on
receives the bytes directly: the choice costs one short read per connection and nothing per
frame. RocketMQ's own proxy picks remoting or gRPC per connection the same way
(``remoting/netty/protocol/ProtocolNegotiationHandler.java``).

This module belongs to neither protocol's package, so neither imports the other
(tests/test_layering.py): ``server/native/tcp.py`` (the listener) accepts connections and makes
the native ones; a :class:`SecondProtocol` given to it (``server/remoting``'s port, handed over by
the process that composes the servers) makes the remoting ones. Both kinds are
:class:`Served`: the listener bounds them together — one connection cap, one cap on those still
proving who they are, one deadline for that, one budget of buffered bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pocketmq.errors import BrokerError
from pocketmq.protocol.remoting.sniff import SNIFF_SIZE, WireProtocol, sniff_protocol
from pocketmq.server.ratelog import RateLimitedLog
from pocketmq.server.rpcstats import RpcLatency

__all__ = [
    "Budget",
    "PortLimits",
    "PortShare",
    "ProtocolSniffer",
    "SecondProtocol",
    "Served",
]


class Served(Protocol):
    """What the listener asks of any connection it holds, whatever its protocol."""

    @property
    def connected(self) -> bool:
        """``connection_made`` was called (after a TLS handshake, if any)."""

    def fail(self, exc: BrokerError) -> None:
        """Close the connection to make room, telling the client why if its protocol can."""

    def expire(self, now: float) -> None:
        """Close the connection if it overstayed its deadline (proof of identity, idle time)."""

    def close(self) -> None:
        """Close the connection."""


class PortLimits(Protocol):
    """The per-connection bounds of a port (``server/native/limits.py`` ``ConnectionLimits``)
    that a connection of either protocol reads."""

    @property
    def hello_timeout(self) -> float:
        """Seconds a connection has to prove who it is (HELLO; a signed request)."""

    @property
    def idle_timeout(self) -> float:
        """Seconds of silence after which an established connection is closed."""

    @property
    def max_frame_before_hello(self) -> int:
        """The largest frame taken from a connection that has not proved who it is."""


class Budget(Protocol):
    """The bytes all connections of a port hold for partly received frames
    (``server/native/limits.py`` ``BufferBudget``)."""

    limit: int
    used: int

    def change(self, held_before: int, held_now: int) -> bool:
        """Account one connection's holding; False when it would pass the limit."""


@dataclass(frozen=True, slots=True)
class PortShare:
    """What every connection of one port shares, handed to a :class:`SecondProtocol`:
    ``on_established`` once a connection proved who it is (it stops counting against the cap
    of connections in their handshake), ``on_close`` when it is gone."""

    limits: PortLimits
    budget: Budget
    clock: Callable[[], float]
    log: RateLimitedLog
    latency: RpcLatency
    tasks: set[asyncio.Task[None]]
    on_established: Callable[[Any], None]
    on_close: Callable[[Any], None]


class SecondProtocol(Protocol):
    """A protocol served on a port besides the native one (the remoting port of
    ``server/remoting``): it makes the connection a sniffed client is handed to."""

    def connection(self, share: PortShare, opened_at: float) -> Any:
        """A new connection (an ``asyncio.Protocol`` that is also :class:`Served`) accepted at
        ``opened_at`` (its deadlines count from then)."""


class ProtocolSniffer(asyncio.Protocol):
    """A new connection until its first bytes say which protocol it speaks (module doc).

    ``choose(self, protocol)`` makes the connection of that protocol and puts it in the
    listener's books in this one's place; the sniffer then hands it the transport and the bytes
    read so far. Silent past ``hello_timeout``, or closed to make room, it is handed to the
    native side, which answers as it always did (a peer that said nothing gets the native
    "no HELLO" error)."""

    def __init__(
        self,
        choose: Callable[[ProtocolSniffer, WireProtocol], Any],
        on_close: Callable[[ProtocolSniffer], None],
        *,
        hello_timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self._choose = choose
        self._on_close = on_close
        self._hello_timeout = hello_timeout
        self._first = b""
        self._transport: asyncio.BaseTransport | None = None
        self._chosen: Any = None
        self.opened_at = clock()
        self.connected = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Hold the transport until the first bytes arrive."""
        self._transport = transport
        self.connected = True

    def data_received(self, data: bytes) -> None:
        """Decide once enough bytes arrived (never more than :data:`SNIFF_SIZE`)."""
        first = self._first + data if self._first else data
        protocol = sniff_protocol(first[:SNIFF_SIZE])
        if protocol is None:
            self._first = first  # shorter than SNIFF_SIZE: a bounded wait
            return
        self._hand_over(protocol, first)

    def eof_received(self) -> bool | None:
        """A peer that leaves before saying anything: close (False: the transport does)."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone before it was handed over: out of the listener's books."""
        if self._chosen is None:
            self._on_close(self)

    def _hand_over(self, protocol: WireProtocol, first: bytes) -> Any:
        transport = self._transport
        assert transport is not None and self._chosen is None
        chosen = self._chosen = self._choose(self, protocol)
        transport.set_protocol(chosen)
        chosen.connection_made(transport)
        if first:
            chosen.data_received(first)
        return chosen

    def _to_native(self) -> Any:
        return self._chosen or self._hand_over(WireProtocol.UNKNOWN, b"")

    # -- Served ---------------------------------------------------------------------------

    def fail(self, exc: BrokerError) -> None:
        """Closed to make room: the native side tells the peer why, as it always did."""
        if self._transport is None:
            return
        self._to_native().fail(exc)

    def expire(self, now: float) -> None:
        """Silent past ``hello_timeout``: the native side closes it with its error."""
        if self._transport is not None and now - self.opened_at >= self._hello_timeout:
            self._to_native().expire(now)

    def close(self) -> None:
        """Close the connection."""
        if self._chosen is not None:
            self._chosen.close()
        elif self._transport is not None:
            self._transport.close()
