"""Client settings shared by producers, consumers and the admin client."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

__all__ = ["ClientConfig", "default_client_id", "default_servers", "parse_servers"]


def parse_servers(raw: str) -> tuple[str, ...]:
    """``"h1:p1, h2:p2"`` (commas or semicolons) as addresses; blanks are dropped."""
    return tuple(part.strip() for part in raw.replace(";", ",").split(",") if part.strip())


def default_servers() -> tuple[str, ...]:
    """Where to connect when nothing is configured: ``POCKETMQ_SERVER``, else the local broker."""
    return parse_servers(os.environ.get("POCKETMQ_SERVER", "127.0.0.1:10911"))


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
