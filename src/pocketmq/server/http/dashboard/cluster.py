"""The cluster page (``/cluster``), its self-refreshing body (``/cluster/body``, polled by htmx
every two seconds) and its JSON twin (``/api/cluster``): every broker group known to the name
server with its members' roles, replication, controller, disk and traffic, the groups and topics
summed over the cluster, and the proxy workers (docs/operations.md, "Cluster view")."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from pocketmq.errors import PocketMQError
from pocketmq.server.auth.acl import CLUSTER, Action
from pocketmq.server.http.cluster import BrokerRow, ClusterSnapshot, ClusterView

if TYPE_CHECKING:
    from pocketmq.server.http.dashboard.views import Dashboard

__all__ = ["ClusterPages", "Formats", "snapshot_json"]

POLL_SECONDS = 2
"""How often the open page asks for a new body."""


class Formats:
    """How the cluster page writes sizes, rates and times (handed to the templates)."""

    @staticmethod
    def size(count: float) -> str:
        """Bytes in the largest unit that fits ("–" when unknown)."""
        if count < 0:
            return "–"
        for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if count >= size:
                return f"{count / size:.1f} {unit}"
        return f"{count:.0f} B"

    @staticmethod
    def rate(value: float) -> str:
        """A rate per second ("–" when not recorded)."""
        if value < 0:
            return "–"
        return f"{value:.0f}" if value >= 100 else f"{value:.1f}"

    @staticmethod
    def clock(at: float) -> str:
        """A wall time as UTC time of day ("–" when unknown)."""
        if at <= 0:
            return "–"
        return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")

    @staticmethod
    def duration(seconds: float) -> str:
        """Seconds in the largest unit that fits."""
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if seconds >= size:
                return f"{seconds / size:.1f} {unit}"
        return f"{seconds:.1f} s"


class ClusterPages:
    """Routes of the cluster view over a :class:`ClusterView` (module doc)."""

    def __init__(self, dashboard: Dashboard, cluster: ClusterView) -> None:
        self._dashboard = dashboard
        self._cluster = cluster

    def add_routes(self, app: web.Application) -> None:
        """Register the page, its body and its JSON."""
        app.router.add_get("/cluster", self.page)
        app.router.add_get("/cluster/body", self.page)
        app.router.add_get("/api/cluster", self.page)

    async def page(self, request: web.Request) -> web.Response:
        """The whole page, the body alone (htmx), or JSON (under ``/api/``)."""
        board = self._dashboard
        try:
            board.check(request, ("Cluster", CLUSTER, Action.GET))
        except PocketMQError as exc:
            return board.failure(request, exc)
        snapshot = await self._cluster.snapshot()
        if request.path.startswith("/api/"):
            return web.json_response(snapshot_json(snapshot))
        template = "cluster_body.html" if request.path.endswith("/body") else "cluster.html"
        return board.render(
            request,
            template,
            cluster=snapshot,
            groups=[(name, rows, _failover(rows)) for name, rows in snapshot.broker_groups()],
            fmt=Formats,
            now=time.time(),
            scheme=request.scheme,
            poll=POLL_SECONDS,
        )


def _failover(rows: list[BrokerRow]) -> dict[str, Any]:
    """The group's master as its members report it, and its last failover: when, how long it
    took, to which broker (the member that reports the latest one)."""
    answering = [r for r in rows if r.figures is not None]
    masters = sorted((r for r in answering if r.role == "master"), key=lambda r: -r.epoch)
    latest: BrokerRow | None = None
    for row in answering:
        at = float(row.controller.get("last_failover_at", 0) or 0)
        if at > 0 and (latest is None or at > float(latest.controller["last_failover_at"])):
            latest = row
    return {
        "master": masters[0] if masters else None,
        "masters": len(masters),
        "at": float(latest.controller["last_failover_at"]) if latest else 0.0,
        "took": float(latest.controller.get("last_failover_seconds", 0)) if latest else 0.0,
        "to": latest.broker_id if latest else None,
    }


def snapshot_json(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """``/api/cluster``: the snapshot as plain values."""
    return {
        "taken_at": snapshot.taken_at,
        "namesrv": snapshot.namesrv,
        "namesrv_error": snapshot.namesrv_error,
        "brokers": [
            {
                "group": row.group,
                "broker_id": row.broker_id,
                "address": row.address,
                "http_address": row.http_address,
                "role": row.role,
                "epoch": row.epoch,
                "reachable": row.figures is not None,
                "error": row.error,
                "registered": not row.gone_since,
                "gone_since": row.gone_since,
                "this": row.this,
                "figures": _plain(row.figures) if row.figures else None,
            }
            for row in snapshot.brokers
        ],
        "groups": [_plain(g) for g in snapshot.groups],
        "topics": [_plain(t) for t in snapshot.topics],
    }


def _plain(value: Any) -> Any:
    """A structure as JSON values with field names (the wire's structures are arrays)."""
    if isinstance(value, msgspec.Struct):
        return {name: _plain(getattr(value, name)) for name in value.__struct_fields__}
    if hasattr(value, "__dataclass_fields__"):
        return {name: _plain(getattr(value, name)) for name in value.__dataclass_fields__}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value
