"""Exactly-once business effects on top of at-least-once messaging (seed 003).

The producer writes each message as a *stub* in the same transaction as the business change
(:class:`Outbox`); a relay sends it after the commit and a :class:`ResendScheduler` resends what
got lost, escalating to manual handling (:class:`LoggingAlert`, :class:`WebhookAlert`,
:class:`EmailAlert`) after ``max_sends``. The consumer wraps its handler in
:class:`IdempotentConsumer`, which logs every receipt, takes a Redis lease as a fast path and lets
a conditional database update, committed with the handler's effects, decide.

Storage is pluggable (:class:`ReliabilityBackend`): :class:`MemoryBackend` always, ``SqlBackend``
(SQLite, PostgreSQL, MariaDB/MySQL; needs the ``sql`` extra) and ``RedisLeaseStore`` (needs the
``redis`` extra). Those two are loaded on first access so that importing this package does not
require SQLAlchemy or redis-py. ``docs/reliability.md`` has the whole story.
"""

import typing

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
from pocketmq.reliability.sender import InMemorySender, MessageSender
from pocketmq.reliability.stub import LogEntry, LogStatus, MessageStub, StubStatus, new_message_id

if typing.TYPE_CHECKING:
    from pocketmq.reliability.backends.redis import RedisLeaseStore
    from pocketmq.reliability.backends.sql import SqlBackend, SqlTransaction
    from pocketmq.reliability.schema import ReliabilityTables, reliability_tables

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

_LAZY = {
    "SqlBackend": "pocketmq.reliability.backends.sql",
    "SqlTransaction": "pocketmq.reliability.backends.sql",
    "RedisLeaseStore": "pocketmq.reliability.backends.redis",
    "ReliabilityTables": "pocketmq.reliability.schema",
    "reliability_tables": "pocketmq.reliability.schema",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pocketmq.reliability' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
