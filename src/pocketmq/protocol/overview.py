"""A broker's figures in one compact answer, for the cluster view of another broker's dashboard
(``BROKER_OVERVIEW``; docs/operations.md, "Cluster view").

Every broker serves the cluster page; it asks each other broker of the cluster for this over the
authenticated native port (never by reading another broker's HTML), at most every few seconds
whoever looks. It carries what the page shows of one broker: its role and replication state, its
disk, its traffic, and its groups and topics with their totals (the page sums them over the
cluster). ``replication`` and ``store`` are the very dictionaries of ``BROKER_STATUS``, so the
two answers never disagree on a field.
"""

from __future__ import annotations

from typing import Any

from pocketmq.protocol.body import Body

__all__ = ["BrokerOverviewResponse", "GroupFigures", "TopicFigures", "WorkerFigures"]


class GroupFigures(Body, frozen=True):
    """One consumer group on this broker: what waits for it, and who consumes."""

    name: str
    lag: int  # stored, not yet consumed, over its topics (its retry topic included)
    dlq_depth: int  # messages in %DLQ%<group>
    retry_backlog: int  # waiting in %RETRY%<group> or in flight from it
    inflight: int  # popped, not acknowledged
    consumers: int
    topics: list[str] = []


class TopicFigures(Body, frozen=True):
    """One topic on this broker: its queues, what is kept, what came in."""

    name: str
    topic_type: str
    queues: int
    stored: int  # messages kept (max - min offset over the queues)
    messages_in: int  # stored since the broker started
    rate_in: float = -1.0  # per second over the last history interval; -1: not recorded


class WorkerFigures(Body, frozen=True):
    """One gRPC proxy worker of this broker (``--grpc-workers``): where its ``/metrics`` is."""

    number: int
    pid: int
    metrics_address: str = ""  # host:port of its HTTP port; "" when it has none
    running: bool = True


class BrokerOverviewResponse(Body, frozen=True):
    """What the cluster view shows of one broker (module doc)."""

    broker_name: str
    broker_id: int
    version: str
    uptime_seconds: float
    http_address: str  # its dashboard, "" when its HTTP port is off
    replication: dict[str, Any]  # BROKER_STATUS's replication part
    store: dict[str, Any]  # BROKER_STATUS's store part (disk free and total included)
    messages_in: int  # totals since the broker started
    messages_out: int
    bytes_in: int
    bytes_out: int
    rate_in: float = -1.0  # messages per second over the last history interval; -1: unknown
    rate_out: float = -1.0
    cpu_percent: float = -1.0  # of one core over the last history interval; -1: unknown
    groups: list[GroupFigures] = []  # at most OVERVIEW_ROWS, the most lagging first
    topics: list[TopicFigures] = []  # at most OVERVIEW_ROWS, by name
    workers: list[WorkerFigures] = []
    truncated: bool = False  # groups or topics were cut to OVERVIEW_ROWS
