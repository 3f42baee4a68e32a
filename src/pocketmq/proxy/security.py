"""What a proxy needs to be as safe as the broker it fronts (docs/proxy.md, "Security").

The gRPC side checks each official client exactly as the broker's in-process adapter does — the
same signature check against the broker's users, the same ACL — by reading the broker's own user
and rule files. The native side signs in to the broker: a worker of ``serve --grpc-workers`` as
the broker's gateway identity with the secret it was handed, a stand-alone proxy as a member of
the cluster (``--cluster-key``) or else as the user in
``POCKETMQ_ACCESS_KEY``/``POCKETMQ_SECRET_KEY``; over TLS when the broker's port speaks it. With
credentials it also checks the broker's proof that it knows them (docs/security.md).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pocketmq.errors import InvalidArgumentError
from pocketmq.server.auth.acl import AclStore
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.cluster import CLUSTER_USER, load_cluster_key
from pocketmq.server.auth.network import is_loopback
from pocketmq.server.auth.users import GATEWAY_USER, UserStore
from pocketmq.server.workers import GATEWAY_SECRET_VARIABLE

__all__ = ["GatewaySecurity"]


@dataclass(frozen=True)
class GatewaySecurity:
    """The proxy's checks of its clients and its credentials toward its broker."""

    users: UserStore | None = None  # authentication on the gRPC port when set
    authorizer: Authorizer | None = None  # and the ACL
    tls_pem: tuple[bytes, bytes] | None = None  # (key, certificate chain) served on gRPC
    permissive: bool = False  # TLS and plaintext on the one gRPC port
    link_tls: ssl.SSLContext | None = None  # the broker's native port speaks TLS
    credentials: tuple[str, str] = ("", "")  # (access key, secret) toward the broker

    @classmethod
    def build(
        cls,
        *,
        data_dir: str | None,
        authentication: bool,
        authorization: bool,
        tls_cert: str | None,
        tls_key: str | None,
        grpc_tls: str,
        broker_ca: str | None,
        broker_host: str,
        environment: Mapping[str, str],
        cluster_key: str | None = None,
    ) -> GatewaySecurity:
        """From the ``pocketmq proxy`` options (module doc); a missing or unreadable file is
        an error here, at start-up."""
        users = authorizer = None
        if authentication:
            if not data_dir:
                raise InvalidArgumentError("authentication needs the broker's data directory")
            config_dir = os.path.join(data_dir, "config")
            users = UserStore(config_dir)
            users.load()
            if authorization:
                acl = AclStore(config_dir)
                acl.load(strict=False)  # a damaged file: no rules, so normal users are refused
                authorizer = Authorizer(users, acl)
        tls_pem = None
        if grpc_tls != "disabled":
            if not (tls_cert and tls_key):
                raise InvalidArgumentError(f"--grpc-tls {grpc_tls} needs --tls-cert and --tls-key")
            tls_pem = (Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())
        link_tls = None
        if broker_ca:
            link_tls = ssl.create_default_context(cafile=broker_ca)
            # a worker pins its own broker's certificate, which may be a leaf (self-signed)
            link_tls.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            link_tls.check_hostname = not is_loopback(broker_host)
        credentials = _credentials(environment, cluster_key)
        return cls(users, authorizer, tls_pem, grpc_tls == "permissive", link_tls, credentials)


def _credentials(environment: Mapping[str, str], cluster_key: str | None) -> tuple[str, str]:
    """Who the proxy is toward its broker (module doc). A worker is handed its broker's gateway
    secret, empty when the broker has no authentication (then it signs in as nobody, whatever
    the environment holds)."""
    if GATEWAY_SECRET_VARIABLE in environment:
        secret = environment[GATEWAY_SECRET_VARIABLE]
        return (GATEWAY_USER, secret) if secret else ("", "")
    if cluster_key:
        return (CLUSTER_USER, load_cluster_key(cluster_key).current)
    return (
        environment.get("POCKETMQ_ACCESS_KEY", ""),
        environment.get("POCKETMQ_SECRET_KEY", ""),
    )
