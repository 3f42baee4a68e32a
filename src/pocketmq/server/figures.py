"""A broker's answer to ``BROKER_OVERVIEW``: its figures as the cluster view shows them
(protocol/overview.py; docs/operations.md, "Cluster view").

One builder for both readers: another broker's dashboard asks for it over the native port, and
a broker's own dashboard builds it in-process for its own row, so the two never differ. Everything
comes from :mod:`pocketmq.broker.overview` (offsets and counters, no message read) and the
process's own figures (HTTP address, the last history sample, its proxy workers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pocketmq.broker import Broker
from pocketmq.broker.overview import group_totals, status, topic_totals, traffic_totals
from pocketmq.protocol import structs as w
from pocketmq.version import VERSION

__all__ = ["OVERVIEW_ROWS", "ProcessFigures", "broker_overview"]

OVERVIEW_ROWS = 1000
"""Groups and topics one answer carries at most (the most lagging groups, topics by name): the
answer stays far below a frame's limit on a broker with many thousands of them."""


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """What the broker process knows beyond the broker core: where its dashboard is, the last
    history sample's rates (-1: not recorded), and its gRPC workers."""

    http_address: str = ""
    rate_in: float = -1.0
    rate_out: float = -1.0
    cpu_percent: float = -1.0
    topic_rates: Mapping[str, float] = field(default_factory=dict)
    workers: Sequence[w.WorkerFigures] = ()


def broker_overview(broker: Broker, process: ProcessFigures) -> w.BrokerOverviewResponse:
    """The ``BROKER_OVERVIEW`` answer of ``broker`` (module doc)."""
    figures: dict[str, Any] = status(broker)
    traffic = traffic_totals(broker)
    groups = sorted(group_totals(broker), key=lambda g: (-g.lag, g.name))
    topics = topic_totals(broker)
    rates = process.topic_rates
    return w.BrokerOverviewResponse(
        broker_name=broker.name,
        broker_id=broker.config.broker_id,
        version=VERSION,
        uptime_seconds=float(figures["uptime_seconds"]),
        http_address=process.http_address,
        replication=figures["replication"],
        store=figures["store"],
        messages_in=traffic.messages_in,
        messages_out=traffic.messages_out,
        bytes_in=traffic.bytes_in,
        bytes_out=traffic.bytes_out,
        rate_in=process.rate_in,
        rate_out=process.rate_out,
        cpu_percent=process.cpu_percent,
        groups=[
            w.GroupFigures(
                g.name, g.lag, g.dlq_depth, g.retry_backlog, g.inflight, g.consumers, list(g.topics)
            )
            for g in groups[:OVERVIEW_ROWS]
        ],
        topics=[
            w.TopicFigures(
                t.name, t.topic_type, t.queues, t.stored, t.messages_in, rates.get(t.name, -1.0)
            )
            for t in topics[:OVERVIEW_ROWS]
        ],
        workers=list(process.workers),
        truncated=len(groups) > OVERVIEW_ROWS or len(topics) > OVERVIEW_ROWS,
    )
