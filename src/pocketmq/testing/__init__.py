"""Helpers for testing against real pocketmq components.

- :class:`BrokerProcess` / :class:`NameServerProcess`: real ``pocketmq serve`` / ``pocketmq
  namesrv`` processes on free loopback ports, with ``stop`` (SIGTERM), ``kill`` (SIGKILL) and
  ``restart``.
- :func:`require_service`: an external service a test needs (Redis, PostgreSQL, MariaDB); fails
  under CI, skips locally with a clear reason.
"""

from pocketmq.testing.process import BrokerProcess, NameServerProcess, write_config
from pocketmq.testing.services import ServiceUnavailable, require_service, service_available

__all__ = [
    "BrokerProcess",
    "NameServerProcess",
    "ServiceUnavailable",
    "require_service",
    "service_available",
    "write_config",
]
