"""The resend scheduler: find lost messages, send them again, escalate the hopeless.

The rules are docs/reliability.md "Resend scheduler and manual handling".

Each run does two things:

1. **Resend.** Select stubs that are pending (``UNCONFIRMED`` or ``UNKNOWN``), have sends left
   (``send_count < max_sends``), are due (``next_resend_at <= now``), have no message-log row for
   the configured consumer group, and either were never stored (``queue_offset IS NULL``) or sit
   below the largest offset that group has logged on the same topic/broker/queue — the consumer
   got past them without seeing them, so they were lost. Stored stubs the consumer has *not* yet
   passed are left alone (they are only queued behind a backlog) until ``offset_wait`` after
   their resend time (see ``policy.py``). Each is sent again with the same message id, so a copy
   that was not lost after all is dropped by the idempotent consumer.
2. **Escalate.** Pending stubs that used up ``max_sends`` and are past their last resend time are
   handed to manual handling once: recorded in ``last_error`` and announced through the alerts.

The next resend time is ``policy.next_resend_at``: exponential by send count plus the backlog
estimate for the queue the message was stored in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pocketmq.reliability.alerts import Alert, LoggingAlert, ManualHandlingEvent
from pocketmq.reliability.backend import ReliabilityBackend, TxT
from pocketmq.reliability.clock import Clock
from pocketmq.reliability.dispatch import SendAttempt, StubWorker
from pocketmq.reliability.policy import BacklogEstimator, ResendPolicy
from pocketmq.reliability.sender import MessageSender

__all__ = ["ResendReport", "ResendScheduler"]

_log = logging.getLogger("pocketmq.reliability.resend")


@dataclass(frozen=True, kw_only=True, slots=True)
class ResendReport:
    """What one scheduler run did: sends by outcome, and the hand-overs to a human."""

    sent: int = 0
    unknown: int = 0
    failed: int = 0
    skipped: int = 0
    alerted: int = 0
    alert_failures: int = 0

    @property
    def attempted(self) -> int:
        """Stubs actually sent (whatever the outcome); skipped ones were someone else's."""
        return self.sent + self.unknown + self.failed


class ResendScheduler(StubWorker):
    """Resends lost stubs and escalates exhausted ones, every ``interval`` seconds.

    Why a separate worker from the relay: finding *lost* messages needs the consumers' log and
    a wait long enough for them to have been consumed, so it runs on its own, slower schedule.
    """

    name = "resend"

    def __init__(
        self,
        backend: ReliabilityBackend[TxT],
        sender: MessageSender,
        *,
        group: str | None,
        policy: ResendPolicy | None = None,
        estimator: BacklogEstimator | None = None,
        alerts: Sequence[Alert] = (LoggingAlert(),),
        clock: Clock | None = None,
        batch_size: int = 100,
        interval: float = 5.0,
    ) -> None:
        super().__init__(
            backend,
            sender,
            policy=policy,
            estimator=estimator,
            clock=clock,
            batch_size=batch_size,
            interval=interval,
        )
        self.group = group
        self.alerts = tuple(alerts)

    def __repr__(self) -> str:
        return f"ResendScheduler(group={self.group!r}, {self.lifecycle.value})"

    async def run_once(self) -> ResendReport:
        """One pass: resend every lost stub that is due, then escalate the exhausted ones."""
        policy = self.policy
        counts = await self._send_pages(
            lambda: self.backend.stubs_for_resend(
                self.clock.now(),
                max_sends=policy.max_sends,
                group=self.group,
                offset_wait=policy.offset_wait,
                limit=self.batch_size,
            )
        )
        alerted, alert_failures = await self._escalate()
        return ResendReport(
            sent=counts[SendAttempt.SENT],
            unknown=counts[SendAttempt.UNKNOWN],
            failed=counts[SendAttempt.FAILED],
            skipped=counts[SendAttempt.SKIPPED],
            alerted=alerted,
            alert_failures=alert_failures,
        )

    async def _escalate(self) -> tuple[int, int]:
        alerted = failures = 0
        now = self.clock.now()
        exhausted = await self.backend.stubs_exhausted(
            now, max_sends=self.policy.max_sends, limit=self.batch_size
        )
        for stub in exhausted:
            note = f"{stub.send_count} sends, still {stub.status.value}"
            if not await self.backend.mark_manual(stub.message_id, note, now):
                continue  # another scheduler took it
            event = ManualHandlingEvent(stub=stub, max_sends=self.policy.max_sends, detected_at=now)
            delivered = 0
            for alert in self.alerts:
                # Each hook on its own: a broken mail server must not keep the others from
                # telling a human, nor make them repeat the alert at every run.
                try:
                    await alert.notify(event)
                except Exception:
                    _log.exception("alert %r for %s failed", alert, stub.message_id)
                else:
                    delivered += 1
            if delivered or not self.alerts:
                alerted += 1
            else:
                failures += 1
                _log.error("no alert hook reached anyone for %s; will try again", stub.message_id)
                await self.backend.clear_manual(stub.message_id, stub.last_error, self.clock.now())
        return alerted, failures
