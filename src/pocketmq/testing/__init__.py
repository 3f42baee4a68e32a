"""Helpers for testing applications against real pocketmq components.

``pocketmq.testing.services`` decides what to do when an external service a test needs (Redis,
PostgreSQL, MariaDB) is not running: fail under CI, skip locally with a clear reason.
"""

from pocketmq.testing.services import ServiceUnavailable, require_service, service_available

__all__ = ["ServiceUnavailable", "require_service", "service_available"]
