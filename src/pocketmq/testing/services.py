"""External services for tests: fail loudly in CI, skip with a reason on a laptop.

A test that needs Redis must not silently pass when Redis is missing: under CI (the ``CI``
environment variable is set) a missing service is a failure; elsewhere the test is skipped and the
reason names the service and the address that was tried.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Final

__all__ = ["KNOWN_SERVICES", "ServiceUnavailable", "require_service", "service_available"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ServiceAddress:
    """Where a test expects a service, and the command that starts it: the skip reason tells a
    developer how to run the test instead of only that it did not run."""

    name: str
    host: str
    port: int
    how_to_start: str


KNOWN_SERVICES: Final[dict[str, ServiceAddress]] = {
    "redis": ServiceAddress(
        name="Redis",
        host="127.0.0.1",
        port=6379,
        how_to_start="redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save ''",
    ),
    "postgres": ServiceAddress(
        name="PostgreSQL",
        host="127.0.0.1",
        port=5432,
        how_to_start="pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    ),
    "mariadb": ServiceAddress(
        name="MariaDB",
        host="127.0.0.1",
        port=3306,
        how_to_start="start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
    ),
    "rabbitmq": ServiceAddress(
        name="RabbitMQ",
        host="127.0.0.1",
        port=5672,
        how_to_start="rabbitmq-server -detached",
    ),
    "nats": ServiceAddress(
        name="NATS with JetStream",
        host="127.0.0.1",
        port=4222,
        how_to_start="nats-server -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server &",
    ),
}


class ServiceUnavailable(RuntimeError):
    """Raised under CI when a service a test needs is not reachable."""


def service_available(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_service(key: str) -> ServiceAddress:
    """Return the service's address, or fail (CI) / skip (elsewhere) when it is not running."""
    service = KNOWN_SERVICES[key]
    if service_available(service.host, service.port):
        return service
    reason = (
        f"{service.name} is not reachable at {service.host}:{service.port} "
        f"(start it with: {service.how_to_start})"
    )
    if os.environ.get("CI"):
        raise ServiceUnavailable(reason)
    import pytest  # only tests call this; keep pytest out of the runtime import graph

    pytest.skip(reason)
