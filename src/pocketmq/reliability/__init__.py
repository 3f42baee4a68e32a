"""Exactly-once business effects on top of at-least-once messaging (docs/reliability.md).

The producer writes each message as a *stub* in the same transaction as the business change
(:class:`Outbox`); a relay sends it after the commit and a :class:`ResendScheduler` resends what
got lost, escalating to manual handling (:class:`LoggingAlert`, :class:`WebhookAlert`,
:class:`EmailAlert`) after ``max_sends``. The consumer wraps its handler in
:class:`IdempotentConsumer`, which logs every receipt, takes a Redis lease as a fast path and lets
a conditional database update, committed with the handler's effects, decide.

Storage is pluggable (:class:`ReliabilityBackend`): :class:`MemoryBackend` always, ``SqlBackend``
(SQLite, PostgreSQL, MariaDB/MySQL; needs the ``sql`` extra) and ``RedisLeaseStore`` (needs the
``redis`` extra). ``docs/reliability.md`` has the whole story.

Every name is loaded on first access: importing the package (or one of its small modules, such as
:mod:`~pocketmq.reliability.database_url` for the command line, or
:mod:`~pocketmq.reliability.policy` for the Spark jobs) needs neither SQLAlchemy nor redis-py, and
does not pay for the alert hooks' mail and HTTP modules.
"""

import typing

from pocketmq.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from pocketmq.reliability.alerts import (
        Alert,
        EmailAlert,
        LoggingAlert,
        ManualHandlingEvent,
        WebhookAlert,
    )
    from pocketmq.reliability.backend import (
        LeaseStore,
        ReliabilityBackend,
        StubConfirmation,
        Transaction,
    )
    from pocketmq.reliability.backends import open_backend
    from pocketmq.reliability.backends.memory import MemoryBackend, MemoryLeaseStore
    from pocketmq.reliability.backends.redis import RedisLeaseStore
    from pocketmq.reliability.backends.sql import SqlBackend, SqlTransaction
    from pocketmq.reliability.clock import Clock, FakeClock, SystemClock
    from pocketmq.reliability.dispatch import SendAttempt
    from pocketmq.reliability.errors import (
        DuplicateMessageIdError,
        ReliabilityError,
        StubNotFoundError,
        StubStateError,
    )
    from pocketmq.reliability.idempotent import (
        ConsumeOutcome,
        ConsumerStatistics,
        Handler,
        IdempotentConsumer,
    )
    from pocketmq.reliability.outbox import Outbox, OutboxRelay
    from pocketmq.reliability.policy import BacklogEstimator, NoBacklog, ResendPolicy
    from pocketmq.reliability.resend import ResendReport, ResendScheduler
    from pocketmq.reliability.schema import ReliabilityTables, reliability_tables
    from pocketmq.reliability.sender import InMemorySender, MessageSender
    from pocketmq.reliability.stub import (
        LogEntry,
        LogStatus,
        MessageStub,
        StubStatus,
        new_message_id,
    )

__all__ = [
    "Alert",
    "BacklogEstimator",
    "Clock",
    "ConsumeOutcome",
    "ConsumerStatistics",
    "DuplicateMessageIdError",
    "EmailAlert",
    "FakeClock",
    "Handler",
    "IdempotentConsumer",
    "InMemorySender",
    "LeaseStore",
    "LogEntry",
    "LogStatus",
    "LoggingAlert",
    "ManualHandlingEvent",
    "MemoryBackend",
    "MemoryLeaseStore",
    "MessageSender",
    "MessageStub",
    "NoBacklog",
    "Outbox",
    "OutboxRelay",
    "RedisLeaseStore",
    "ReliabilityBackend",
    "ReliabilityError",
    "ReliabilityTables",
    "ResendPolicy",
    "ResendReport",
    "ResendScheduler",
    "SendAttempt",
    "SqlBackend",
    "SqlTransaction",
    "StubConfirmation",
    "StubNotFoundError",
    "StubStateError",
    "StubStatus",
    "SystemClock",
    "Transaction",
    "WebhookAlert",
    "new_message_id",
    "open_backend",
    "reliability_tables",
]

_MODULES = {
    "Alert": "alerts",
    "EmailAlert": "alerts",
    "LoggingAlert": "alerts",
    "ManualHandlingEvent": "alerts",
    "WebhookAlert": "alerts",
    "LeaseStore": "backend",
    "ReliabilityBackend": "backend",
    "StubConfirmation": "backend",
    "Transaction": "backend",
    "open_backend": "backends",
    "MemoryBackend": "backends.memory",
    "MemoryLeaseStore": "backends.memory",
    "RedisLeaseStore": "backends.redis",
    "SqlBackend": "backends.sql",
    "SqlTransaction": "backends.sql",
    "Clock": "clock",
    "FakeClock": "clock",
    "SystemClock": "clock",
    "SendAttempt": "dispatch",
    "DuplicateMessageIdError": "errors",
    "ReliabilityError": "errors",
    "StubNotFoundError": "errors",
    "StubStateError": "errors",
    "ConsumeOutcome": "idempotent",
    "ConsumerStatistics": "idempotent",
    "Handler": "idempotent",
    "IdempotentConsumer": "idempotent",
    "Outbox": "outbox",
    "OutboxRelay": "outbox",
    "BacklogEstimator": "policy",
    "NoBacklog": "policy",
    "ResendPolicy": "policy",
    "ResendReport": "resend",
    "ResendScheduler": "resend",
    "ReliabilityTables": "schema",
    "reliability_tables": "schema",
    "InMemorySender": "sender",
    "MessageSender": "sender",
    "LogEntry": "stub",
    "LogStatus": "stub",
    "MessageStub": "stub",
    "StubStatus": "stub",
    "new_message_id": "stub",
}


__getattr__, __dir__ = _lazy_exports(__name__, _MODULES, globals(), __all__)
