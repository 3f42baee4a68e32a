"""What the HTTP port runs with (the ``http_*`` and ``history_*`` settings of ``[server]``;
docs/security.md, "Dashboard and HTTP API", and docs/operations.md, "Charts"): the names it
answers to, what one client may hold, how long a dashboard sign-in lasts, how often the charts'
history is sampled."""

from __future__ import annotations

from dataclasses import dataclass, field

from pocketmq.errors import InvalidArgumentError
from pocketmq.server.http.history import DEFAULT_MAX_SERIES
from pocketmq.server.http.hosts import HostPolicy

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_HISTORY_INTERVAL",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_SESSION_HOURS",
    "HttpSettings",
]

DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_HEADER_TIMEOUT = 15.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_SESSION_HOURS = 12.0
DEFAULT_HISTORY_INTERVAL = 10.0
MIN_HISTORY_SERIES = 10
# one source address may hold at most this share of the connections, so one client cannot lock
# the others out (IPv6 addresses count per /64, what one host usually has)
_PER_ADDRESS_SHARE = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpSettings:
    """The HTTP port's limits, checked when built (InvalidArgumentError)."""

    hosts: HostPolicy = field(default_factory=lambda: HostPolicy.build("127.0.0.1"))
    # open connections at once (a connection over it is answered 503 and closed)
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # a request's headers must arrive within this of the connection's start or of the previous
    # answer (so it is also how long an idle keep-alive connection stays open)
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    # a request's body must arrive within this, and a client must take an answer's bytes: a
    # connection that stalls the server longer is closed
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    # a dashboard sign-in ends this long after it was made
    session_seconds: float = DEFAULT_SESSION_HOURS * 3600
    # the charts' history: sampled this often (seconds, at most 10; 0: not recorded), and how
    # many series it keeps at most (docs/operations.md, "Charts")
    history_interval: float = DEFAULT_HISTORY_INTERVAL
    history_max_series: int = DEFAULT_MAX_SERIES

    def __post_init__(self) -> None:
        if not 0 <= self.history_interval <= 10:
            raise InvalidArgumentError("history_interval must be between 0 (off) and 10 s")
        if self.history_max_series < MIN_HISTORY_SERIES:
            raise InvalidArgumentError(f"history_max_series must be >= {MIN_HISTORY_SERIES}")
        if self.max_connections < 1:
            raise InvalidArgumentError("http_max_connections must be >= 1")
        for name, value in (
            ("http_header_timeout", self.header_timeout),
            ("http_body_timeout", self.body_timeout),
            ("http_session_hours", self.session_seconds),
        ):
            if not value > 0:
                raise InvalidArgumentError(f"{name} must be > 0")

    @property
    def max_per_address(self) -> int:
        """Connections one source address may hold at once."""
        return max(1, self.max_connections // _PER_ADDRESS_SHARE)
