"""The sections of ``pocketmq serve``'s configuration: small frozen dataclasses, each checked
when it is built.

Why sections: the ``[server]`` settings fall into a few concerns (where the native port listens,
the gRPC port, TLS, authentication, replication, failover, the HTTP port, the name server; the
connection limits are :class:`~pocketmq.server.native.limits.ConnectionLimits` itself), and a
check belongs next to the values it reads. :class:`~pocketmq.server.app_config.AppConfig` holds
one of each and checks only what spans two of them.

The TOML file stays flat (docs/design.md, "Configuration"): a section's field is the
``[server]`` key ``PREFIX + name`` (``Ha.port`` is ``ha_port``), or the key its field names
with :func:`named` (``Ha.master`` is ``master``). Errors name that key: it is what the user
wrote and what the docs list.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from pocketmq.errors import InvalidArgumentError
from pocketmq.server.auth.handshake import parse_reachable
from pocketmq.server.auth.throttle import (
    DEFAULT_FAILURE_BURST,
    DEFAULT_FAILURE_RATE,
    FailureThrottle,
)
from pocketmq.server.grpc import AUTO_RENEW_INVISIBLE
from pocketmq.server.ha.etcd import parse_controller
from pocketmq.server.ha.failover import ControllerTimings
from pocketmq.server.ha.handshake import HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, MAX_LINKS
from pocketmq.server.http.history import DEFAULT_MAX_SERIES
from pocketmq.server.http.hosts import HostPolicy
from pocketmq.server.http.settings import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_HISTORY_INTERVAL,
    DEFAULT_SESSION_HOURS,
    HttpSettings,
)
from pocketmq.server.http.settings import DEFAULT_MAX_CONNECTIONS as DEFAULT_HTTP_CONNECTIONS
from pocketmq.server.namesrv.routes import MAX_REGISTERED_BROKERS
from pocketmq.settings import check_numbers, check_ports, check_positive

__all__ = [
    "GRPC_TLS_MODES",
    "REGISTER_INTERVAL",
    "Auth",
    "Controller",
    "Grpc",
    "Ha",
    "Http",
    "Listen",
    "Namesrv",
    "Section",
    "Tls",
    "named",
    "server_keys",
]

REGISTER_INTERVAL = 30.0
GRPC_TLS_MODES = ("disabled", "permissive", "enforcing")


def named(key: str, default: Any = None) -> Any:
    """A section field whose ``[server]`` key is ``key``, not its section's prefix + its name."""
    return field(default=default, metadata={"key": key})


def server_keys(section: type[Any]) -> dict[str, str]:
    """Field name -> ``[server]`` key of a section's dataclass (module doc); a dataclass without
    ``PREFIX`` (``ConnectionLimits``) uses its field names as they are."""
    prefix = getattr(section, "PREFIX", "")
    return {item.name: item.metadata.get("key", prefix + item.name) for item in fields(section)}


def _check_address(key: str, value: str | None) -> None:
    """``host:port`` or unset: a malformed one would only fail when first dialled."""
    if value is None:
        return
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidArgumentError(f"{key} {value!r} is not host:port")


class Section:
    """What every section does when built: the number check of ``pocketmq.settings`` (under the
    ``[server]`` key names), then its own :meth:`check`."""

    __slots__ = ()
    PREFIX: ClassVar[str] = ""

    def setting(self, name: str) -> str:
        """The ``[server]`` key of this section's field ``name``."""
        return server_keys(type(self))[name]

    def __post_init__(self) -> None:
        check_numbers(self, self.setting)
        self.check()

    def check(self) -> None:
        """This section's own rules (InvalidArgumentError naming the setting)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Listen(Section):
    """Where the native port listens, and the host clients are told (docs/operations.md)."""

    host: str = "127.0.0.1"
    port: int = 10911  # 0: any free port
    advertise_host: str | None = None

    def check(self) -> None:
        """A port in range."""
        check_ports(self, "port", key=self.setting)


@dataclass(frozen=True, kw_only=True, slots=True)
class Grpc(Section):
    """The RocketMQ 5 gRPC port (docs/grpc.md, docs/proxy.md)."""

    PREFIX: ClassVar[str] = "grpc_"
    port: int | None = 8081  # None: no gRPC port
    # > 0: the port is served by this many proxy processes (server/workers.py)
    workers: int = 0
    # a worker silent this long (it pings every sixth of it) is killed and started again
    worker_silence: float = 30.0
    # push consumers receive with auto_renew and never extend: this is their invisible time
    auto_renew_invisible: float = AUTO_RENEW_INVISIBLE
    # disabled | permissive (TLS and plaintext) | enforcing; "": enforcing with a certificate,
    # permissive (self-signed) without one (docs/security.md, "TLS")
    tls: str = ""

    def check(self) -> None:
        """A port in range, a worker clock and an invisible time that are not 0, a known mode."""
        check_ports(self, "port", key=self.setting)
        check_positive(self, "worker_silence", "auto_renew_invisible", key=self.setting)
        if self.tls and self.tls not in GRPC_TLS_MODES:
            raise InvalidArgumentError(
                f"grpc_tls {self.tls!r} is not one of {', '.join(GRPC_TLS_MODES)}"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Tls(Section):
    """TLS on the native, gRPC and HTTP ports (docs/security.md, "TLS"): PEM files, both or
    neither; ``ca`` is what a slave verifies its master (and a broker its external name server)
    against, default the system's roots."""

    PREFIX: ClassVar[str] = "tls_"
    cert: str | None = None
    key: str | None = None
    ca: str | None = None

    def check(self) -> None:
        """Both files or neither."""
        if bool(self.cert) != bool(self.key):
            raise InvalidArgumentError("TLS needs both tls_cert and tls_key")

    def pem(self) -> tuple[bytes, bytes] | None:
        """The key and certificate chain as PEM bytes (gRPC takes them so), or None."""
        if not (self.cert and self.key):
            return None
        return Path(self.key).read_bytes(), Path(self.cert).read_bytes()

    def context(self) -> ssl.SSLContext | None:
        """The server-side TLS context, or None; InvalidArgumentError when the files cannot be
        loaded (the one check left to start-up: it reads files)."""
        if not (self.cert and self.key):
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(f"cannot load the TLS certificate or key: {exc}") from None
        return context


@dataclass(frozen=True, kw_only=True, slots=True)
class Auth(Section):
    """Who may do what (docs/security.md): authentication, authorization, the cluster key and
    the failed-login throttle."""

    # gRPC and native requests must be signed by a user of `pocketmq user`
    authentication: bool = False
    # each request of a normal user must be allowed by `pocketmq acl` rules
    authorization: bool = False
    # listen on a non-loopback address without authentication all the same
    insecure: bool = False
    # the cluster key's file ("Trust inside the cluster"); None with authentication:
    # config/cluster.key in the data directory, created at the first start
    cluster_key: str | None = None
    # ip:port clients may reach this broker at besides its own and advertised addresses (NAT,
    # port forwarding, a load balancer): the handshake's proof is bound to them
    reachable_at: tuple[str, ...] = ()
    # failed logins per source address: a bucket of this many, refilled this many per second
    failure_burst: int = named("auth_failure_burst", DEFAULT_FAILURE_BURST)
    failure_rate: float = named("auth_failure_rate", DEFAULT_FAILURE_RATE)

    def check(self) -> None:
        """Authorization rests on authentication; the addresses and the throttle are sound."""
        if self.authorization and not self.authentication:
            raise InvalidArgumentError("authorization needs authentication (--authentication)")
        self.reachable()
        self.throttle()

    def reachable(self) -> set[str]:
        """``reachable_at``, normalized; a malformed entry is an InvalidArgumentError."""
        try:
            return parse_reachable(self.reachable_at)
        except ValueError as exc:
            raise InvalidArgumentError(f"reachable_at: {exc}") from None

    def throttle(self) -> FailureThrottle:
        """The failed-login buckets of this process's ports."""
        return FailureThrottle(self.failure_burst, self.failure_rate)


@dataclass(frozen=True, kw_only=True, slots=True)
class Ha(Section):
    """Replication (docs/replication.md §2 "Limits", docs/security.md "Replication port"): where
    this master's slaves connect (None: the native port + 1, or any free port when that is 0),
    a slave's master, mutual TLS, and what a link may cost."""

    PREFIX: ClassVar[str] = "ha_"
    port: int | None = None
    master: str | None = named("master")
    # a slave shows the broker's certificate, verified against tls_ca
    mutual_tls: bool = False
    max_connections: int = MAX_LINKS
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT

    def check(self) -> None:
        """A port in range, a master address, at least one link, timeouts that wait."""
        check_ports(self, "port", key=self.setting)
        _check_address("master", self.master)
        if self.max_connections < 1:
            raise InvalidArgumentError("ha_max_connections must be at least 1")
        check_positive(self, "handshake_timeout", "idle_timeout", key=self.setting)


@dataclass(frozen=True, kw_only=True, slots=True)
class Controller(Section):
    """Automatic failover (docs/replication.md §9): etcd://H:P[,H:P...] and its clock; the margin
    must leave the master time to write."""

    PREFIX: ClassVar[str] = "controller_"
    url: str | None = named("controller")
    lease: int = 6
    margin: float = 2.0
    claim_delay: float = 1.0

    def check(self) -> None:
        """The address parses; the clock holds together."""
        self.endpoints()
        self.timings()

    def endpoints(self) -> list[tuple[str, int]] | None:
        """etcd's (host, port) pairs, None without a controller."""
        return parse_controller(self.url) if self.url else None

    def timings(self) -> ControllerTimings:
        """The failover clock."""
        if self.lease < 2 or not 0 < self.margin < self.lease:
            raise InvalidArgumentError(
                "controller_lease must be >= 2 s and controller_margin between 0 and the lease"
            )
        check_positive(self, "claim_delay", key=self.setting)
        return ControllerTimings(lease=self.lease, margin=self.margin, claim_delay=self.claim_delay)


@dataclass(frozen=True, kw_only=True, slots=True)
class Http(Section):
    """Metrics, health checks and the dashboard (docs/operations.md, "Metrics", "Charts";
    docs/security.md, "Dashboard and HTTP API"): the port (None: none), its names beyond its
    address, its connection limit and timeouts, how long a sign-in lasts, and the charts (a
    sample every ``history_interval`` seconds, <= 10, 0: none; at most ``history_max_series``)."""

    PREFIX: ClassVar[str] = "http_"
    port: int | None = 5557
    hosts: tuple[str, ...] = ()
    max_connections: int = DEFAULT_HTTP_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    session_hours: float = DEFAULT_SESSION_HOURS
    history_interval: float = named("history_interval", DEFAULT_HISTORY_INTERVAL)
    history_max_series: int = named("history_max_series", DEFAULT_MAX_SERIES)

    def check(self) -> None:
        """A port in range; the limits as :class:`HttpSettings` checks them."""
        check_ports(self, "port", key=self.setting)
        self.settings("127.0.0.1", None)

    def settings(self, bind_host: str, advertised: str | None) -> HttpSettings:
        """The port's settings when bound to ``bind_host``; ``advertised`` is the host clients
        are told, one of the names the port answers to."""
        return HttpSettings(
            hosts=HostPolicy.build(bind_host, self.hosts, advertised),
            max_connections=self.max_connections,
            header_timeout=self.header_timeout,
            body_timeout=self.body_timeout,
            session_seconds=self.session_hours * 3600,
            history_interval=self.history_interval,
            history_max_series=self.history_max_series,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Namesrv(Section):
    """The name server: the embedded one's port (None: none), or an external one's address
    (``pocketmq namesrv``; over TLS with ``namesrv_tls``, verified against ``tls_ca``), how
    often the broker registers, and how many brokers the embedded one keeps at most."""

    PREFIX: ClassVar[str] = "namesrv_"
    port: int | None = 9876
    address: str | None = named("namesrv")
    tls: bool = False
    register_interval: float = named("register_interval", REGISTER_INTERVAL)
    max_brokers: int = named("max_registered_brokers", MAX_REGISTERED_BROKERS)

    def check(self) -> None:
        """A port in range, an address, a registration that waits, room for one broker."""
        check_ports(self, "port", key=self.setting)
        _check_address("namesrv", self.address)
        check_positive(self, "register_interval", key=self.setting)
        if self.max_brokers < 1:
            raise InvalidArgumentError("max_registered_brokers must be at least 1")
