"""Successes are reported in frames of at most REPORT_AT entries, not one large frame a second
(a broker records a report between deliveries: docs/semantics.md, "attempt history")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec

from pocketmq.client.consumer.hotpath import REPORT_AT, OutcomeReports, ProcessQueue
from pocketmq.client.message import MessageView
from pocketmq.protocol import RequestCode


class _Connection:
    """The one-way side of a client connection: what was sent, in order."""

    address = "127.0.0.1:1"
    is_open = True

    def __init__(self) -> None:
        self.sent: list[tuple[RequestCode, msgspec.Struct]] = []

    def oneway(self, code: RequestCode, body: msgspec.Struct) -> None:
        self.sent.append((code, body))


def _reports(connection: _Connection) -> OutcomeReports:
    pool = SimpleNamespace(open_connections=lambda: [connection])
    state: Any = SimpleNamespace(
        config=SimpleNamespace(report_outcomes=True),
        group="g",
        client_id="c-1",
        client=SimpleNamespace(pool=pool),
    )
    return OutcomeReports(state)


def _queue(connection: _Connection) -> ProcessQueue:
    # a real one: the compiled OutcomeReports.record checks its argument's type
    return ProcessQueue(key=("b", "t", 0), address=connection.address, expression="*")


def _views(first: int, count: int) -> list[MessageView]:
    return [
        MessageView(message_id=f"M{n}", topic="t", queue_id=0, queue_offset=n, body=b"")
        for n in range(first, first + count)
    ]


def test_a_busy_consumer_reports_every_report_at_successes_without_waiting_for_the_timer() -> None:
    connection = _Connection()
    reports = _reports(connection)
    queue = _queue(connection)
    for first in range(0, 3 * REPORT_AT, 32):
        reports.record(queue, _views(first, 32), started=0.0)
    sizes = [len(body.attempts) for _, body in connection.sent]  # type: ignore[attr-defined]
    assert sizes == [REPORT_AT] * 3
    assert {code for code, _ in connection.sent} == {RequestCode.REPORT_OUTCOMES}


def test_the_timer_sends_what_is_left() -> None:
    connection = _Connection()
    reports = _reports(connection)
    queue = _queue(connection)
    reports.record(queue, _views(0, 10), started=0.0)
    assert connection.sent == []
    reports.flush()
    [(_, body)] = connection.sent
    assert [a.message_id for a in body.attempts] == [f"M{n}" for n in range(10)]  # type: ignore[attr-defined]
