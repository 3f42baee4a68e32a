"""Sending one stub: claim it, send it, write down what happened.

Shared by the relay (first sends), the resend scheduler (later ones) and the Spark pipeline's resend
job, so all three follow the same bookkeeping: the claim is a compare-and-set on (send_count,
next_resend_at) that pushes the resend time ``claim_timeout`` ahead, which keeps every other relay
or scheduler off the stub while this one sends — and lets them pick it up again if this one dies
before recording the result.

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
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from pocketmq.errors import InvalidArgumentError, SendOutcomeUnknownError
from pocketmq.reliability._worker import PeriodicWorker
from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.clock import Clock
from pocketmq.reliability.policy import BacklogEstimator, NoBacklog, ResendPolicy
from pocketmq.reliability.sender import MessageSender
from pocketmq.reliability.stub import MessageStub

__all__ = ["SendAttempt", "StubWorker", "send_stub", "send_stubs"]

_log = logging.getLogger("pocketmq.reliability.dispatch")


class SendAttempt(enum.Enum):
    """How one attempt to send a stub ended (the relay, the scheduler and the Spark job count
    them the same way)."""

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
    except Exception as exc:
        unknown = isinstance(exc, SendOutcomeUnknownError)
        after = clock.now()
        await backend.record_send_failed(
            stub.message_id,
            outcome_unknown=unknown,
            error=_describe(exc),
            next_resend_at=policy.next_resend_at(after, count),
            now=after,
        )
        return SendAttempt.UNKNOWN if unknown else SendAttempt.FAILED
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


async def send_stubs(
    backend: ReliabilityBackend[Any],
    sender: MessageSender,
    stubs: Iterable[MessageStub],
    *,
    policy: ResendPolicy,
    estimator: BacklogEstimator,
    clock: Clock,
) -> Counter[SendAttempt]:
    """:func:`send_stub` for each stub in turn; how many attempts ended which way.

    One after the other, on purpose: each stub's claim, send and record stay in order, and a
    slow broker slows one sender down instead of piling up sends.
    """
    counts: Counter[SendAttempt] = Counter()
    for stub in stubs:
        attempt = await send_stub(
            backend, sender, stub, policy=policy, estimator=estimator, clock=clock
        )
        counts[attempt] += 1
    return counts


class StubWorker(PeriodicWorker):
    """A periodic worker that sends pages of due stubs: the relay and the resend scheduler.

    Why a base: both hold the same things (backend, sender, policy, backlog estimator, clock,
    page size) and run the same page loop; they differ only in which stubs are due.
    """

    def __init__(
        self,
        backend: ReliabilityBackend[Any],
        sender: MessageSender,
        *,
        policy: ResendPolicy | None,
        estimator: BacklogEstimator | None,
        clock: Clock | None,
        batch_size: int,
        interval: float,
    ) -> None:
        super().__init__(interval=interval)
        if batch_size < 1:
            raise InvalidArgumentError("batch_size must be at least 1")
        self.backend = backend
        self.sender = sender
        self.policy = policy if policy is not None else ResendPolicy()
        self.estimator = estimator if estimator is not None else NoBacklog()
        self.clock = clock if clock is not None else backend.clock
        self.batch_size = batch_size

    async def _send_pages(
        self, due: Callable[[], Awaitable[Sequence[MessageStub]]]
    ) -> dict[SendAttempt, int]:
        """Send page after page of ``due()`` stubs until a page is short or none could be
        claimed (a full page may hold more; a page of others' claims would repeat forever).

        Returns a count for every :class:`SendAttempt`, zeros included.
        """
        counts = dict.fromkeys(SendAttempt, 0)
        while True:
            stubs = await due()
            page = await send_stubs(
                self.backend,
                self.sender,
                stubs,
                policy=self.policy,
                estimator=self.estimator,
                clock=self.clock,
            )
            for attempt, n in page.items():
                counts[attempt] += n
            if len(stubs) < self.batch_size or page[SendAttempt.SKIPPED] == len(stubs):
                return counts
