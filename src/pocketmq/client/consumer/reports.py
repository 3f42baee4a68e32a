"""Reporting successful attempts to the broker, for the attempt history.

The broker records failed attempts itself (it receives them as send-backs); successes it only
learns from the consumer. They are sent in batches, one-way, every :data:`REPORT_AT` successes,
about once a second and on close (small frames: a broker records them between deliveries):
``pocketmq message history`` may miss the last second of a crashed consumer's successes, never a
message (docs/semantics.md, "attempt history"). ``report_outcomes=False`` turns this off.
"""

from __future__ import annotations

import contextlib
import time

from pocketmq.client.consumer.process_queue import ProcessQueue
from pocketmq.client.consumer.state import ConsumerState
from pocketmq.client.message import MessageView
from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["REPORT_AT", "OutcomeReports"]

REPORT_AT = 256  # successes pending for one broker that are sent without waiting for the timer


class OutcomeReports:
    """Successful attempts waiting to be reported, per broker address."""

    def __init__(self, state: ConsumerState) -> None:
        self._state = state
        self._pending: dict[str, list[w.Attempt]] = {}

    def record(self, pq: ProcessQueue, views: list[MessageView], started: float) -> None:
        """Remember that ``views`` of ``pq`` were consumed by an attempt begun at ``started``."""
        state = self._state
        if not state.config.report_outcomes or not views:
            return
        finished = int(time.time() * 1000)
        pending = self._pending.setdefault(pq.address, [])
        pending.extend(
            w.Attempt(
                view.message_id,
                state.group,
                view.topic,
                view.delivery_attempt,
                state.client_id,
                "SUCCESS",
                "",
                int(started * 1000),
                finished,
                view.message_group or "",
            )
            for view in views
        )
        if len(pending) >= REPORT_AT:
            self.flush()

    def flush(self) -> None:
        """Send what was recorded to the brokers still connected (one-way, best effort)."""
        reports, self._pending = self._pending, {}
        state = self._state
        for address, attempts in reports.items():
            for connection in state.client.pool.open_connections():
                if connection.address == address:
                    with contextlib.suppress(PocketMQError):
                        connection.oneway(
                            RequestCode.REPORT_OUTCOMES,
                            w.ReportOutcomesRequest(state.group, state.client_id, attempts),
                        )
                    break
