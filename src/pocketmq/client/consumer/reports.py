"""Reporting successful attempts to the broker, for the attempt history.

The code is in :mod:`pocketmq.client.consumer._reports`; this module exports
its compiled twin when the build made one from the same sources and ``POCKETMQ_NO_EXTENSIONS``
is not set, else the pure module (docs/design.md "Compiled hot paths").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = ["REPORT_AT", "OutcomeReports"]

if TYPE_CHECKING:
    from pocketmq.client.consumer._reports import REPORT_AT, OutcomeReports
else:
    _implementation = load("pocketmq.client.consumer._reports")
    REPORT_AT = _implementation.REPORT_AT
    OutcomeReports = _implementation.OutcomeReports
