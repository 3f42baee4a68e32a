"""What ``pocketmq serve`` runs with: the broker's settings and the ``[server]`` sections
(``server/sections.py``), and the checked values built from more than one of them: the gRPC
port's TLS, the replication port's TLS, the HTTP port's host names.

One validation path (docs/design.md, "Configuration"): every section checks itself when it
is built and :class:`AppConfig` checks what spans sections, so Python
(``AppConfig(ha=Ha(port=...))``) and the TOML file (:meth:`AppConfig.from_table`, which builds
the same dataclasses with ``msgspec.convert``) refuse the same values with the same words.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from pocketmq.broker import BrokerConfig
from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol.paging import message_limit_problem
from pocketmq.server.auth.cluster import CLUSTER_KEY_FILE, ClusterKeyFile, create_cluster_key
from pocketmq.server.ha.handshake import LinkPolicy
from pocketmq.server.http.settings import HttpSettings
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.sections import (
    REGISTER_INTERVAL,
    Auth,
    Controller,
    Grpc,
    Ha,
    Http,
    Listen,
    Namesrv,
    Tls,
    server_keys,
)

__all__ = ["REGISTER_INTERVAL", "AppConfig"]

# msgspec's "... - at `$.field`" (or `$.field[0]`): the path a type error was found at
_AT_PATH = re.compile(r" - at `\$\.(\w+)(.*)`$")


@dataclass(frozen=True, kw_only=True, slots=True)
class AppConfig:
    """Everything ``pocketmq serve`` runs with: the broker's settings plus one section per
    concern of the ``[server]`` table (module doc; docs/semantics.md, "Connections")."""

    broker: BrokerConfig = field(default_factory=BrokerConfig)
    listen: Listen = field(default_factory=Listen)
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    grpc: Grpc = field(default_factory=Grpc)
    tls: Tls = field(default_factory=Tls)
    auth: Auth = field(default_factory=Auth)
    ha: Ha = field(default_factory=Ha)
    controller: Controller = field(default_factory=Controller)
    http: Http = field(default_factory=Http)
    namesrv: Namesrv = field(default_factory=Namesrv)

    def __post_init__(self) -> None:
        """What spans sections, at construction (InvalidArgumentError); each section checked
        its own values when it was built. Loading the TLS files is left to start-up."""
        store = self.broker.store
        # the largest message the store accepts must fit in one frame
        problem = message_limit_problem(store.max_message_size, store.max_properties_size)
        if problem is not None:
            raise InvalidArgumentError(problem)
        if self.ha.mutual_tls and not (self.tls.cert and self.tls.ca):
            raise InvalidArgumentError(
                "ha_mutual_tls needs tls_cert, tls_key and tls_ca (the CA that signed every "
                "broker's certificate)"
            )
        self.http_settings()

    @classmethod
    def from_table(cls, table: Mapping[str, Any], broker: BrokerConfig | None = None) -> AppConfig:
        """The config of a flat ``[server]`` table (the TOML file's, with the command line's
        options over it): each key goes to its section, each section is converted to its
        types and checked as in Python. An unknown key, a wrong type or a bad value is an
        InvalidArgumentError naming the key."""
        owner = {
            key: (section, name)
            for section, kind in _SECTIONS.items()
            for name, key in server_keys(kind).items()
        }
        grouped: dict[str, dict[str, Any]] = {}
        for key, value in table.items():
            if key not in owner:
                raise InvalidArgumentError(f"unknown setting [server] {key}")
            section, name = owner[key]
            grouped.setdefault(section, {})[name] = value
        sections = {name: _convert(values, _SECTIONS[name]) for name, values in grouped.items()}
        return cls(broker=broker or BrokerConfig(), **sections)

    def grpc_tls_mode(self) -> str:
        """The gRPC port's TLS mode: ``grpc_tls``, else enforcing with a certificate and
        permissive (self-signed) without one."""
        return self.grpc.tls or ("enforcing" if self.tls.cert else "permissive")

    def grpc_tls_pem(self) -> tuple[bytes, bytes] | None:
        """The gRPC port's key and certificate: the broker's, or a self-signed pair generated
        into the data directory when TLS is asked for without one."""
        if self.grpc_tls_mode() == "disabled":
            return None
        found = self.tls.pem()
        if found is not None:
            return found
        from pocketmq.server.auth.certificates import self_signed

        cert, key = self_signed(os.path.join(self.broker.data_dir, "config"), [self.listen.host])
        return Path(key).read_bytes(), Path(cert).read_bytes()

    def replication_client_tls(self) -> ssl.SSLContext | None:
        """What a slave connects to its master's replication port with: TLS verifying the
        master's certificate against ``tls_ca`` (or the system's roots) when the group uses
        TLS (``tls_cert`` set), else None; with ``ha_mutual_tls`` it shows the broker's own
        certificate."""
        tls = self.tls
        if not tls.cert:
            return None
        try:
            context = ssl.create_default_context(cafile=tls.ca or None)
            if self.ha.mutual_tls and tls.key:
                context.load_cert_chain(tls.cert, tls.key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"cannot load the TLS CA file {tls.ca!r} or the broker's certificate: {exc}"
            ) from None
        return context

    def replication_server_tls(self) -> ssl.SSLContext | None:
        """What the replication port serves with: the broker's TLS context, asking each slave
        for a certificate signed by ``tls_ca`` with ``ha_mutual_tls``."""
        context = self.tls.context()
        if not self.ha.mutual_tls or context is None:
            return context
        try:
            context.load_verify_locations(cafile=self.tls.ca)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"cannot load the TLS CA file {self.tls.ca!r}: {exc}"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def replication_policy(self, key: ClusterKeyFile | None) -> LinkPolicy:
        """Who may open a replication link (``key``) and what one may cost."""
        return LinkPolicy(
            key=key,
            max_links=self.ha.max_connections,
            handshake_timeout=self.ha.handshake_timeout,
            idle_timeout=self.ha.idle_timeout,
        )

    def http_settings(self, advertised: str | None = None) -> HttpSettings:
        """The HTTP port's settings; ``advertised`` is the host clients are told, one of the
        names the port answers to."""
        return self.http.settings(self.listen.host, advertised or self.listen.advertise_host)

    def cluster_key_file(self) -> ClusterKeyFile | None:
        """The cluster key this process holds (docs/security.md, "Trust inside the cluster"):
        ``cluster_key``'s file, which must exist; else with authentication the data
        directory's ``config/cluster.key``, created at the first start; else None. A bad file
        is an :class:`InvalidArgumentError` naming it."""
        if self.auth.cluster_key:
            return ClusterKeyFile(self.auth.cluster_key)
        if not self.auth.authentication:
            return None
        path = os.path.join(self.broker.data_dir, "config", CLUSTER_KEY_FILE)
        create_cluster_key(path, exist_ok=True)
        return ClusterKeyFile(path)


# AppConfig's field -> its section's dataclass, for the TOML file's flat [server] table
_SECTIONS: dict[str, type[Any]] = {
    "listen": Listen,
    "limits": ConnectionLimits,
    "grpc": Grpc,
    "tls": Tls,
    "auth": Auth,
    "ha": Ha,
    "controller": Controller,
    "http": Http,
    "namesrv": Namesrv,
}


def _convert(values: dict[str, Any], section: type[Any]) -> Any:
    """One section from its ``[server]`` values: msgspec converts the types and runs the
    section's checks; a type error is reworded to name the ``[server]`` key."""
    try:
        return msgspec.convert(values, section)
    except msgspec.ValidationError as exc:
        if isinstance(exc.__cause__, InvalidArgumentError):
            raise exc.__cause__ from None
        message = str(exc)
        found = _AT_PATH.search(message)
        if found is None:
            raise InvalidArgumentError(message) from None
        key = server_keys(section)[found.group(1)]
        raise InvalidArgumentError(
            f"[server] {key}{found.group(2)}: {message[: found.start()]}"
        ) from None
