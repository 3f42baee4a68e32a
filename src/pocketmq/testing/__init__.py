"""Helpers for testing against real pocketmq components.

- :class:`BrokerProcess` / :class:`NameServerProcess`: real ``pocketmq serve`` / ``pocketmq
  namesrv`` processes on free loopback ports, with ``stop`` (SIGTERM), ``kill`` (SIGKILL) and
  ``restart``.
- :func:`require_service`: an external service a test needs (Redis, PostgreSQL, MariaDB); fails
  under CI, skips locally with a clear reason.
- :class:`EtcdProcess`: a real etcd member for automatic failover (``--controller``).
"""

from pocketmq.testing.etcd import EtcdProcess, require_etcd
from pocketmq.testing.process import BrokerProcess, NameServerProcess, write_config
from pocketmq.testing.services import ServiceUnavailable, require_service, service_available

__all__ = [
    "BrokerProcess",
    "EtcdProcess",
    "NameServerProcess",
    "ServiceUnavailable",
    "require_etcd",
    "require_service",
    "service_available",
    "write_config",
]
