"""The transactional outbox: write the stub with the business change, send it after the commit.

Why an outbox at all (docs/reliability.md "Exactly-once business effects"): a business that commits
"order paid" and then sends "order paid" can crash in between, or the broker can lose the message;
either way the effect elsewhere never happens. Writing the message as a *stub* in the same database
transaction as the business change makes "the change happened" and "the message will be delivered"
one fact. A relay sends stubs after the commit; the resend scheduler (``resend.py``) retries the
ones that got lost.

Three ways to stage a message, all in the business transaction:

* ``async with outbox.transaction() as tx:`` — the toolkit opens the transaction; write business
  rows with ``tx.connection`` / ``tx.session`` and call ``tx.add_message(...)``. After the commit
  the relay is woken at once.
* ``await backend.add_message(your_connection_or_session, message)`` — inside a transaction you
  already manage (SQL backend).
* ``message, insert = backend.stub_insert(message)`` — a plain SQLAlchemy ``INSERT`` for code that
  uses a synchronous session; execute it in your transaction. No I/O happens in the toolkit.

The last two are not seen by the relay until its next poll (``poll_interval``, 1 s) unless you
call ``outbox.relay.wakeup()`` after committing.

The relay sends only never-sent stubs (send_count 0); a crash between commit and send leaves the
stub with send_count 0 and due, so the next relay — this process after a restart, or another
one — sends it. Several relays may run against one database: each stub is claimed before it is
sent (see ``dispatch.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Generic

from pocketmq.client import Message
from pocketmq.reliability._resource import AsyncResource
from pocketmq.reliability.alerts import Alert, LoggingAlert
from pocketmq.reliability.backend import ReliabilityBackend, TxT
from pocketmq.reliability.clock import Clock
from pocketmq.reliability.dispatch import SendAttempt, StubWorker
from pocketmq.reliability.policy import BacklogEstimator, ResendPolicy
from pocketmq.reliability.resend import ResendScheduler
from pocketmq.reliability.sender import MessageSender

__all__ = ["Outbox", "OutboxRelay"]


class OutboxRelay(StubWorker):
    """Sends never-sent stubs soon after their transaction commits.

    Why a relay besides the scheduler: the first send should follow the commit within
    milliseconds (it is woken by the commit), while the scheduler looks for lost messages only
    every few seconds.
    """

    name = "relay"

    def __init__(
        self,
        backend: ReliabilityBackend[TxT],
        sender: MessageSender,
        *,
        policy: ResendPolicy | None = None,
        estimator: BacklogEstimator | None = None,
        clock: Clock | None = None,
        batch_size: int = 100,
        poll_interval: float = 1.0,
    ) -> None:
        super().__init__(
            backend,
            sender,
            policy=policy,
            estimator=estimator,
            clock=clock,
            batch_size=batch_size,
            interval=poll_interval,
        )

    def __repr__(self) -> str:
        return f"OutboxRelay({self.backend!r}, {self.lifecycle.value})"

    def _on_start(self) -> None:
        self.backend.add_commit_listener(self._committed)

    def _on_close(self) -> None:
        self.backend.remove_commit_listener(self._committed)

    def _committed(self, messages: Sequence[Message]) -> None:
        self.wakeup()

    async def run_once(self) -> dict[SendAttempt, int]:
        """Send every due never-sent stub; return how the attempts ended."""
        return await self._send_pages(
            lambda: self.backend.stubs_for_relay(self.clock.now(), limit=self.batch_size)
        )


class Outbox(AsyncResource, Generic[TxT]):
    """The producer side in one resource: transactions that stage messages, a relay, a scheduler.

    ::

        async with Outbox(backend, producer, group="billing") as outbox:
            async with outbox.transaction() as tx:
                await tx.connection.execute(orders.insert().values(id=42, state="paid"))
                tx.add_message(Message(topic="order-events", body=b'{"id": 42}'))

    ``group`` is the consumer group whose message log proves receipt for the resend rule (None:
    any group's log counts). ``run_scheduler=False`` leaves resending to another process.
    """

    def __init__(
        self,
        backend: ReliabilityBackend[TxT],
        sender: MessageSender,
        *,
        group: str | None = None,
        policy: ResendPolicy | None = None,
        estimator: BacklogEstimator | None = None,
        alerts: Sequence[Alert] | None = None,
        clock: Clock | None = None,
        run_scheduler: bool = True,
        poll_interval: float = 1.0,
        scheduler_interval: float = 5.0,
    ) -> None:
        self.backend = backend
        self.relay = OutboxRelay(
            backend,
            sender,
            policy=policy,
            estimator=estimator,
            clock=clock,
            poll_interval=poll_interval,
        )
        self.scheduler: ResendScheduler | None = None
        if run_scheduler:
            self.scheduler = ResendScheduler(
                backend,
                sender,
                group=group,
                policy=policy,
                estimator=estimator,
                alerts=alerts if alerts is not None else (LoggingAlert(),),
                clock=clock,
                interval=scheduler_interval,
            )

    def __repr__(self) -> str:
        return f"Outbox({self.backend!r})"

    def transaction(self) -> AbstractAsyncContextManager[TxT]:
        """A business transaction; ``tx.add_message`` stages outbox messages in it."""
        return self.backend.transaction()

    async def start(self) -> None:
        """Start the relay and, unless ``run_scheduler=False``, the resend scheduler."""
        await self.relay.start()
        if self.scheduler is not None:
            await self.scheduler.start()

    async def aclose(self) -> None:
        """Stop the relay and the scheduler (the backend stays open: it is the caller's)."""
        await self.relay.aclose()
        if self.scheduler is not None:
            await self.scheduler.aclose()
