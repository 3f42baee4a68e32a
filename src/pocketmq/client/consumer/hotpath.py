"""The push consumer's per-message path, receive → listener → commit: the work queue, the process
queues, the listener call, the outcome reports and the concurrent workers (and the message view,
``client/_views.py``).

Their code is in the private modules ``_work``, ``_process_queue``, ``_listener``, ``_reports``
and ``_concurrent``, compiled by the build as one group (docs/design.md, "Compiled hot paths");
this module exports the compiled twins when they were built from the same sources and
``POCKETMQ_NO_EXTENSIONS`` is not set, else the pure modules — all of one or all of the other,
as the twins of a group only ever run together (:mod:`pocketmq.compiled`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = [
    "REPORT_AT",
    "ConcurrentConsumer",
    "Consumption",
    "ListenerCall",
    "OutcomeReports",
    "ProcessQueue",
    "Verdict",
    "WorkQueue",
]

if TYPE_CHECKING:
    from pocketmq.client.consumer._concurrent import ConcurrentConsumer
    from pocketmq.client.consumer._consumption import Consumption
    from pocketmq.client.consumer._listener import ListenerCall, Verdict
    from pocketmq.client.consumer._process_queue import ProcessQueue
    from pocketmq.client.consumer._reports import REPORT_AT, OutcomeReports
    from pocketmq.client.consumer._work import WorkQueue
else:
    _listener = load("pocketmq.client.consumer._listener")
    _reports = load("pocketmq.client.consumer._reports")
    Consumption = load("pocketmq.client.consumer._consumption").Consumption
    ConcurrentConsumer = load("pocketmq.client.consumer._concurrent").ConcurrentConsumer
    ListenerCall, Verdict = _listener.ListenerCall, _listener.Verdict
    ProcessQueue = load("pocketmq.client.consumer._process_queue").ProcessQueue
    REPORT_AT, OutcomeReports = _reports.REPORT_AT, _reports.OutcomeReports
    WorkQueue = load("pocketmq.client.consumer._work").WorkQueue
