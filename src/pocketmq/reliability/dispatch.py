"""Sending one stub: claim it, send it, write down what happened.

Shared by the relay (first sends) and the resend scheduler (later ones), so both follow the same
bookkeeping: the claim is a compare-and-set on (send_count, next_resend_at) that pushes the resend
time ``claim_timeout`` ahead, which keeps every other relay or scheduler off the stub while this
one sends — and lets them pick it up again if this one dies before recording the result.

Outcomes map to the stub as follows:

=========================  ==========================================================
send result                stub afterwards
=========================  ==========================================================
``SendResult``             send_count + 1, broker/queue/offset recorded, UNKNOWN ->
                           UNCONFIRMED, next resend = now + interval + backlog
``SendOutcomeUnknownError``  send_count + 1, status UNKNOWN (it may be stored), next
                           resend = now + interval, ``last_error`` says why
any other exception        send_count + 1 (so a permanent failure still ends in manual
                           handling), next resend = now + interval, ``last_error``
=========================  ==========================================================
"""

from __future__ import annotations

import enum
import logging
from datetime import timedelta
from typing import Any

from pocketmq.errors import SendOutcomeUnknownError
from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.clock import Clock
from pocketmq.reliability.policy import BacklogEstimator, ResendPolicy
from pocketmq.reliability.sender import MessageSender
from pocketmq.reliability.stub import MessageStub

__all__ = ["SendAttempt", "send_stub"]

_log = logging.getLogger("pocketmq.reliability.dispatch")


class SendAttempt(enum.Enum):
    """How one attempt to send a stub ended."""

    SENT = "SENT"
    UNKNOWN = "UNKNOWN"  # may or may not be stored
    FAILED = "FAILED"  # not stored
    SKIPPED = "SKIPPED"  # another sender claimed it first, or it changed meanwhile


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text[:1000]


async def send_stub(
    backend: ReliabilityBackend[Any],
    sender: MessageSender,
    stub: MessageStub,
    *,
    policy: ResendPolicy,
    estimator: BacklogEstimator,
    clock: Clock,
) -> SendAttempt:
    """Claim ``stub``, send it with its stable id, and record the outcome."""
    now = clock.now()
    until = now + timedelta(seconds=policy.claim_timeout)
    if not await backend.claim_stub(stub, until=until, now=now):
        return SendAttempt.SKIPPED
    count = stub.send_count + 1
    try:
        result = await sender.send(stub.to_message())
    except SendOutcomeUnknownError as exc:
        after = clock.now()
        await backend.record_send_failed(
            stub.message_id,
            outcome_unknown=True,
            error=_describe(exc),
            next_resend_at=policy.next_resend_at(after, count),
            now=after,
        )
        return SendAttempt.UNKNOWN
    except Exception as exc:
        after = clock.now()
        await backend.record_send_failed(
            stub.message_id,
            outcome_unknown=False,
            error=_describe(exc),
            next_resend_at=policy.next_resend_at(after, count),
            now=after,
        )
        return SendAttempt.FAILED
    try:
        backlog = await estimator.estimated_delay(result.topic, result.broker_name, result.queue_id)
    except Exception:
        _log.warning("backlog estimator %r failed; assuming no backlog", estimator, exc_info=True)
        backlog = 0.0
    after = clock.now()
    await backend.record_sent(
        stub.message_id,
        result,
        next_resend_at=policy.next_resend_at(after, count, backlog),
        now=after,
    )
    return SendAttempt.SENT
