"""Client settings shared by producers, consumers and the admin client."""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass, field

__all__ = [
    "ClientConfig",
    "default_client_id",
    "default_servers",
    "default_tls",
    "parse_servers",
]


def parse_servers(raw: str) -> tuple[str, ...]:
    """``"h1:p1, h2:p2"`` (commas or semicolons) as addresses; blanks are dropped."""
    return tuple(part.strip() for part in raw.replace(";", ",").split(",") if part.strip())


def default_servers() -> tuple[str, ...]:
    """Where to connect when nothing is configured: ``POCKETMQ_SERVER``, else the local broker."""
    return parse_servers(os.environ.get("POCKETMQ_SERVER", "127.0.0.1:10911"))


def default_tls() -> ssl.SSLContext | bool | None:
    """TLS from the environment (what the CLI and scripts use): ``POCKETMQ_TLS_CA`` names the CA
    file that signed the brokers' certificates; ``POCKETMQ_TLS=1`` trusts the system's CAs."""
    ca = os.environ.get("POCKETMQ_TLS_CA")
    if ca:
        return ssl.create_default_context(cafile=ca)
    return os.environ.get("POCKETMQ_TLS", "") not in ("", "0", "false", "no") or None


def default_client_id() -> str:
    """A client id unique per process and resource (host, pid, random): the broker tells
    consumers of a group apart by it.
    """
    return f"{socket.gethostname()}@{os.getpid()}@{os.urandom(3).hex()}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientConfig:
    """``servers``: any brokers (or name servers) of the cluster; routes come from them."""

    servers: tuple[str, ...] = field(default_factory=default_servers)
    client_id: str = field(default_factory=default_client_id)
    request_timeout: float = 3.0
    connect_timeout: float = 3.0
    route_refresh_interval: float = 30.0
    heartbeat_interval: float = 10.0
    # TLS to the brokers (docs/security.md): an ssl.SSLContext, or True for the system's
    # trusted CAs; None or False: plain TCP
    tls: ssl.SSLContext | bool | None = field(default_factory=default_tls)
    # credentials for brokers that require authentication (docs/security.md); default from
    # POCKETMQ_ACCESS_KEY / POCKETMQ_SECRET_KEY
    access_key: str = field(default_factory=lambda: os.environ.get("POCKETMQ_ACCESS_KEY", ""))
    secret_key: str = field(
        default_factory=lambda: os.environ.get("POCKETMQ_SECRET_KEY", ""), repr=False
    )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context connections use (None: plain TCP)."""
        if isinstance(self.tls, ssl.SSLContext):
            return self.tls
        return ssl.create_default_context() if self.tls else None
