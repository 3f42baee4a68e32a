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

from pocketmq.client.consumer._process_queue import ProcessQueue
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
        # read once, not per message: fixed for the consumer's life (a frozen config, the
        # client's pool; ``client_id`` is a Python property), and a profile put these reads
        # at ~4 % of a default consumer's CPU (docs/benchmarks.md, "The push consumer's client
        # CPU per message")
        self._enabled = state.config.report_outcomes
        self._group = state.group
        self._client_id = state.client_id

    def record(self, pq: ProcessQueue, views: list[MessageView], started: float) -> None:
        """Remember that ``views`` of ``pq`` were consumed by an attempt begun at ``started``."""
        if not self._enabled or not views:
            return
        group, client_id = self._group, self._client_id
        began, finished = int(started * 1000), int(time.time() * 1000)
        pending = self._pending.setdefault(pq.address, [])
        pending.extend(
            w.Attempt(
                view.message_id,
                group,
                view.topic,
                view.delivery_attempt,
                client_id,
                "SUCCESS",
                "",
                began,
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
