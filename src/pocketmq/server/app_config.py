"""What ``pocketmq serve`` runs with (the ``[server]`` section and the broker's settings), and
the checked values built from it: TLS contexts, the failover clock, the connection limits."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from pocketmq.broker import BrokerConfig
from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol import MAX_FRAME_BEFORE_HELLO
from pocketmq.protocol.paging import message_limit_problem
from pocketmq.server.auth.cluster import (
    CLUSTER_KEY_FILE,
    ClusterKeyFile,
    create_cluster_key,
)
from pocketmq.server.auth.handshake import parse_reachable
from pocketmq.server.auth.throttle import (
    DEFAULT_FAILURE_BURST,
    DEFAULT_FAILURE_RATE,
    FailureThrottle,
)
from pocketmq.server.grpc import AUTO_RENEW_INVISIBLE
from pocketmq.server.ha.failover import ControllerTimings
from pocketmq.server.ha.handshake import HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, MAX_LINKS, LinkPolicy
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
from pocketmq.server.native.limits import (
    DEFAULT_HELLO_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    ConnectionLimits,
)
from pocketmq.settings import check_numbers

__all__ = ["REGISTER_INTERVAL", "AppConfig"]

REGISTER_INTERVAL = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class AppConfig:
    """Everything ``pocketmq serve`` runs with: the broker's settings plus the listeners, the name
    server and the connection limits (the ``[server]`` section; docs/semantics.md)."""

    broker: BrokerConfig = field(default_factory=BrokerConfig)
    host: str = "127.0.0.1"
    port: int = 10911
    grpc_port: int | None = 8081
    namesrv_port: int | None = 9876  # embedded name server; None when namesrv is set
    namesrv: str | None = None  # external name server host:port
    advertise_host: str | None = None
    register_interval: float = REGISTER_INTERVAL
    # gRPC push consumers receive with auto_renew and never extend: this is their invisible time
    grpc_auto_renew_invisible: float = AUTO_RENEW_INVISIBLE
    # > 0: the gRPC port is served by this many proxy processes (server/workers.py)
    grpc_workers: int = 0
    # a worker silent this long (it pings every sixth of it) is killed and started again
    grpc_worker_silence: float = 30.0
    # what one native-protocol client may hold (pocketmq.server.native.limits; docs/semantics.md)
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    hello_timeout: float = DEFAULT_HELLO_TIMEOUT
    max_frame_before_hello: int = MAX_FRAME_BEFORE_HELLO
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    # connections in their handshake at once (0: a quarter of max_connections)
    max_pending_connections: int = 0
    # replication (docs/replication.md): where this master's slaves connect (None: the native
    # port + 1, or any free port when the native port is 0), and a slave's master
    ha_port: int | None = None
    master: str | None = None
    # metrics and health checks (docs/operations.md, "Metrics"); None: no HTTP port
    http_port: int | None = 5557
    # the HTTP port's names beyond its address, the advertised host and (on loopback or a
    # wildcard address) localhost; its connection limit and timeouts; how long a dashboard
    # sign-in lasts (docs/security.md, "Dashboard and HTTP API")
    http_hosts: tuple[str, ...] = ()
    http_max_connections: int = DEFAULT_HTTP_CONNECTIONS
    http_header_timeout: float = DEFAULT_HEADER_TIMEOUT
    http_body_timeout: float = DEFAULT_BODY_TIMEOUT
    http_session_hours: float = DEFAULT_SESSION_HOURS
    # the dashboard's charts: a sample every history_interval seconds (<= 10; 0: none), at most
    # history_max_series series (docs/operations.md, "Charts")
    history_interval: float = DEFAULT_HISTORY_INTERVAL
    history_max_series: int = DEFAULT_MAX_SERIES
    # TLS on the native, gRPC and HTTP ports (docs/security.md): PEM files, both or neither
    tls_cert: str | None = None
    tls_key: str | None = None
    # CA bundle a slave verifies its master's replication certificate with (default: the
    # system's roots); replication is over TLS whenever tls_cert is set (docs/security.md)
    tls_ca: str | None = None
    # the external name server (`namesrv`) speaks TLS: verified against tls_ca or the system's
    namesrv_tls: bool = False
    # the replication port (docs/replication.md §2 "Limits", docs/security.md "Replication
    # port"): mutual TLS (a slave shows the broker's certificate, verified against tls_ca),
    # and what links may cost
    ha_mutual_tls: bool = False
    ha_max_connections: int = MAX_LINKS
    ha_handshake_timeout: float = HANDSHAKE_TIMEOUT
    ha_idle_timeout: float = IDLE_TIMEOUT
    # gRPC requests must be signed by a user of `pocketmq user` (docs/security.md)
    authentication: bool = False
    # each request of a normal user must be allowed by `pocketmq acl` rules (docs/security.md)
    authorization: bool = False
    # listen on a non-loopback address without authentication all the same (docs/security.md)
    insecure: bool = False
    # TLS on the gRPC port: disabled | permissive (TLS and plaintext) | enforcing; "" = enforcing
    # with a certificate, permissive (self-signed) without one (docs/security.md, "TLS")
    grpc_tls: str = ""
    # the cluster key (docs/security.md, "Trust inside the cluster"): a file; None with
    # authentication: config/cluster.key in the data directory, created at the first start
    cluster_key: str | None = None
    # ip:port clients may reach this broker at besides its own and advertised addresses (NAT,
    # port forwarding, a load balancer of yours): the handshake's proof is bound to them
    reachable_at: tuple[str, ...] = ()
    # failed logins per source address: a bucket of this many, refilled this many per second
    auth_failure_burst: int = DEFAULT_FAILURE_BURST
    auth_failure_rate: float = DEFAULT_FAILURE_RATE
    # how many brokers the (embedded) name server keeps at most
    max_registered_brokers: int = MAX_REGISTERED_BROKERS
    # automatic failover (docs/replication.md §9): etcd://H:P[,H:P...] and its clock
    controller: str | None = None
    controller_lease: int = 6
    controller_margin: float = 2.0
    controller_claim_delay: float = 1.0

    def __post_init__(self) -> None:
        """Check every setting that needs no file and no network, at construction
        (InvalidArgumentError): the TOML file (``msgspec.convert`` runs this) and Python take
        the same path, and a ``BrokerApp`` built directly fails here, not at start. Loading the
        TLS files is left to :meth:`tls_context`."""
        check_numbers(self)
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidArgumentError("TLS needs both tls_cert and tls_key")
        self.grpc_tls_mode()
        self.connection_limits()
        self.http_settings()
        self.controller_timings()
        self.replication_policy(None)
        self.reachable()
        self.failure_throttle()

    def tls_pem(self) -> tuple[bytes, bytes] | None:
        """The key and certificate chain as PEM bytes (gRPC takes them so), or None."""
        if not (self.tls_cert and self.tls_key):
            return None
        return Path(self.tls_key).read_bytes(), Path(self.tls_cert).read_bytes()

    def grpc_tls_mode(self) -> str:
        """The gRPC port's TLS mode, checked."""
        mode = self.grpc_tls or ("enforcing" if self.tls_cert else "permissive")
        if mode not in ("disabled", "permissive", "enforcing"):
            raise InvalidArgumentError(
                f"grpc_tls {mode!r} is not one of disabled, permissive, enforcing"
            )
        return mode

    def grpc_tls_pem(self) -> tuple[bytes, bytes] | None:
        """The gRPC port's key and certificate: the broker's, or a self-signed pair generated
        into the data directory when TLS is asked for without one."""
        if self.grpc_tls_mode() == "disabled":
            return None
        found = self.tls_pem()
        if found is not None:
            return found
        from pocketmq.server.auth.certificates import self_signed

        cert, key = self_signed(os.path.join(self.broker.data_dir, "config"), [self.host])
        return Path(key).read_bytes(), Path(cert).read_bytes()

    def replication_client_tls(self) -> ssl.SSLContext | None:
        """What a slave connects to its master's replication port with: TLS verifying the
        master's certificate against ``tls_ca`` (or the system's roots) when the group uses
        TLS (``tls_cert`` set), else None; with ``ha_mutual_tls`` it shows the broker's own
        certificate."""
        if not self.tls_cert:
            return None
        try:
            context = ssl.create_default_context(cafile=self.tls_ca or None)
            if self.ha_mutual_tls and self.tls_key:
                context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"cannot load the TLS CA file {self.tls_ca!r} or the broker's certificate: {exc}"
            ) from None
        return context

    def replication_server_tls(self) -> ssl.SSLContext | None:
        """What the replication port serves with: the broker's TLS context, asking each slave
        for a certificate signed by ``tls_ca`` with ``ha_mutual_tls``."""
        context = self.tls_context()
        if not self.ha_mutual_tls:
            return context
        if context is None or not self.tls_ca:
            raise InvalidArgumentError(
                "ha_mutual_tls needs tls_cert, tls_key and tls_ca (the CA that signed every "
                "broker's certificate)"
            )
        try:
            context.load_verify_locations(cafile=self.tls_ca)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"cannot load the TLS CA file {self.tls_ca!r}: {exc}"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def replication_policy(self, key: ClusterKeyFile | None) -> LinkPolicy:
        """Who may open a replication link and what one may cost, validated."""
        if self.ha_max_connections < 1:
            raise InvalidArgumentError("ha_max_connections must be at least 1")
        for name in ("ha_handshake_timeout", "ha_idle_timeout"):
            if not 0 < getattr(self, name) < float("inf"):
                raise InvalidArgumentError(f"{name} must be a positive number of seconds")
        return LinkPolicy(
            key=key,
            max_links=self.ha_max_connections,
            handshake_timeout=self.ha_handshake_timeout,
            idle_timeout=self.ha_idle_timeout,
        )

    def tls_context(self) -> ssl.SSLContext | None:
        """The server-side TLS context, or None; InvalidArgumentError for a half or bad pair."""
        if not self.tls_cert and not self.tls_key:
            return None
        if not (self.tls_cert and self.tls_key):
            raise InvalidArgumentError("TLS needs both tls_cert and tls_key")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(f"cannot load the TLS certificate or key: {exc}") from None
        return context

    def http_settings(self, advertised: str | None = None) -> HttpSettings:
        """The HTTP port's settings, checked (InvalidArgumentError); ``advertised`` is the host
        clients are told, one of the names the port answers to."""
        return HttpSettings(
            hosts=HostPolicy.build(self.host, self.http_hosts, advertised or self.advertise_host),
            max_connections=self.http_max_connections,
            header_timeout=self.http_header_timeout,
            body_timeout=self.http_body_timeout,
            session_seconds=self.http_session_hours * 3600,
            history_interval=self.history_interval,
            history_max_series=self.history_max_series,
        )

    def controller_timings(self) -> ControllerTimings:
        """The failover clock, validated: the margin must leave the master time to write."""
        if self.controller_lease < 2 or not 0 < self.controller_margin < self.controller_lease:
            raise InvalidArgumentError(
                "controller_lease must be >= 2 s and controller_margin between 0 and the lease"
            )
        if self.controller_claim_delay <= 0:
            raise InvalidArgumentError("controller_claim_delay must be > 0")
        return ControllerTimings(
            lease=self.controller_lease,
            margin=self.controller_margin,
            claim_delay=self.controller_claim_delay,
        )

    def connection_limits(self) -> ConnectionLimits:
        """The ``[server]`` connection settings, validated (InvalidArgumentError if not); also
        checks that the largest message the store accepts can be delivered in one frame."""
        store = self.broker.store
        problem = message_limit_problem(store.max_message_size, store.max_properties_size)
        if problem is not None:
            raise InvalidArgumentError(problem)
        return ConnectionLimits(
            max_connections=self.max_connections,
            hello_timeout=self.hello_timeout,
            max_frame_before_hello=self.max_frame_before_hello,
            idle_timeout=self.idle_timeout,
            max_buffered_bytes=self.max_buffered_bytes,
            max_pending_connections=self.max_pending_connections,
        )

    def cluster_key_file(self) -> ClusterKeyFile | None:
        """The cluster key this process holds (docs/security.md, "Trust inside the cluster"):
        ``cluster_key``'s file, which must exist; else with authentication the data
        directory's ``config/cluster.key``, created at the first start; else None. A bad file
        is an :class:`InvalidArgumentError` naming it."""
        if self.cluster_key:
            return ClusterKeyFile(self.cluster_key)
        if not self.authentication:
            return None
        path = os.path.join(self.broker.data_dir, "config", CLUSTER_KEY_FILE)
        create_cluster_key(path, exist_ok=True)
        return ClusterKeyFile(path)

    def failure_throttle(self) -> FailureThrottle:
        """The failed-login buckets of this process's ports, checked."""
        return FailureThrottle(self.auth_failure_burst, self.auth_failure_rate)

    def reachable(self) -> set[str]:
        """``reachable_at``, normalized; a malformed entry is an InvalidArgumentError."""
        try:
            return parse_reachable(self.reachable_at)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
