"""The charts page (``/charts``) and the history it draws (``/api/history``; docs/operations.md,
"Charts").

The page is a frame of empty chart boxes; ``static/charts.js`` asks ``/api/history`` for their
points, draws them with uPlot (``static/uplot.min.js``) and asks again every sampling interval,
so the lines move without a page reload. The history lives in the broker's memory
(:mod:`pocketmq.server.http.history`), so a reload shows the same past.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from pocketmq.broker.overview import group_totals
from pocketmq.errors import InvalidArgumentError, PocketMQError
from pocketmq.server.auth.acl import CLUSTER, Action
from pocketmq.server.http.history import History, SeriesKey
from pocketmq.server.http.sampler import BROKER_SERIES, GROUP_SERIES

if TYPE_CHECKING:
    from pocketmq.server.http.dashboard.views import Dashboard

__all__ = ["Trends"]

_SPANS = ("hour", "day")


class Trends:
    """The charts of one broker (module doc); ``history`` is None when it is not recorded
    (``history_interval = 0``): the page says so and the API answers 404."""

    def __init__(self, dashboard: Dashboard, history: History | None) -> None:
        self._dashboard = dashboard
        self._history = history

    def add_routes(self, app: web.Application) -> None:
        """Register the page and its JSON."""
        app.router.add_get("/charts", self.charts)
        app.router.add_get("/api/history", self.series)

    async def charts(self, request: web.Request) -> web.Response:
        """Rates, CPU and disk of the broker; lag, dead letters and retry backlog of one group
        (``?group=``; the most troubled one by default)."""
        board = self._dashboard
        try:
            board.check(request, ("Cluster", CLUSTER, Action.GET))
            span = _span(request)
        except PocketMQError as exc:
            return board.failure(request, exc)
        totals = group_totals(board.broker)
        worst = max(totals, key=lambda g: (g.dlq_depth, g.retry_backlog, g.lag), default=None)
        groups = [g.name for g in totals]
        group = request.query.get("group", "") or (worst.name if worst else "")
        if group not in groups:
            group = ""
        history = self._history
        return board.render(
            request,
            "charts.html",
            span=span,
            group=group,
            groups=groups,
            step=history.step if history is not None else 0,
            refused=history.refused if history is not None else 0,
        )

    async def series(self, request: web.Request) -> web.Response:
        """``{"span", "step", "times": [s], "series": {name: [value or null]}}``: the broker's
        series, or with ``?group=G`` that group's."""
        board = self._dashboard
        try:
            group = request.query.get("group", "")
            need = ("Group", group, Action.GET) if group else ("Cluster", CLUSTER, Action.GET)
            board.check(request, need)
            span = _span(request)
        except PocketMQError as exc:
            return board.failure(request, exc)
        if self._history is None:
            return web.json_response(
                {"error": "the history is not recorded (history_interval = 0)"}, status=404
            )
        kinds = GROUP_SERIES if group else BROKER_SERIES
        keys: list[SeriesKey] = [(kind, group) for kind in kinds]
        reading = self._history.read(keys, span)
        return web.json_response(
            {
                "span": span,
                "step": reading.step,
                "group": group,
                "times": [round(t, 3) for t in reading.times],
                "series": {key[0]: _points(values) for key, values in reading.series.items()},
            },
            dumps=_dumps,
        )


def _span(request: web.Request) -> str:
    span = request.query.get("span", "hour")
    if span not in _SPANS:
        raise InvalidArgumentError(f"span {span!r} is not one of {', '.join(_SPANS)}")
    return span


def _points(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else round(v, 3) for v in values]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)
