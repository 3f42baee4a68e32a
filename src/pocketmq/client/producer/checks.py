"""Answering a broker's transaction checks.

A broker that has a half message without an outcome asks a live producer of its producer group
(docs/transactions.md §4, "Check-back"). The answer comes from the application's checker, which
looks at the local state and says COMMIT, ROLLBACK or UNKNOWN; UNKNOWN (or a checker that fails)
answers nothing and the broker asks again later. At most ``check_concurrency`` checkers run at
once; one transaction is checked once at a time; past ``max_pending_checks`` waiting checks a new
one is dropped (the broker asks again). The answer is an END_TRANSACTION sent through the producer's
sender, retried like any transaction end.
"""

from __future__ import annotations

import asyncio
import logging

from pocketmq.client.connection import ClientConnection
from pocketmq.client.convert import to_view
from pocketmq.client.producer.handlers import EndTransaction
from pocketmq.client.producer.outcomes import TransactionChecker, TransactionResolution, call_user
from pocketmq.client.producer.sender import Sender
from pocketmq.errors import PocketMQError, ProtocolError, TransactionStateError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

__all__ = ["CheckResponder"]

log = logging.getLogger("pocketmq.client")


class CheckResponder:
    """Receives CHECK_TRANSACTION pushes for ``group`` and answers them with ``checker``."""

    def __init__(
        self,
        checker: TransactionChecker,
        *,
        group: str,
        sender: Sender,
        check_concurrency: int,
        max_pending_checks: int,
    ) -> None:
        self._checker = checker
        self._group = group
        self._sender = sender
        self._slots = asyncio.Semaphore(check_concurrency)
        self._max_pending = max_pending_checks
        self._checking: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.received = self.answered = self.late_answers = self.dropped = 0

    def on_push(self, connection: ClientConnection, code: int, body: bytes) -> None:
        """The connection's push handler: start answering a check (other pushes are not for a
        producer and are ignored)."""
        if code != RequestCode.CHECK_TRANSACTION or self._stopped:
            return
        try:
            request = w.decode_body(body, w.CheckTransactionRequest)
        except ProtocolError as exc:
            log.error("malformed transaction check from %s: %s", connection.address, exc)
            return
        if request.producer_group != self._group:
            log.warning(
                "ignoring a check for producer group %r (this producer is %r)",
                request.producer_group,
                self._group,
            )
            return
        key = request.transaction_id
        if key in self._checking:
            return  # the same transaction is being checked already
        if len(self._checking) >= self._max_pending:
            self.dropped += 1
            log.warning(
                "%d transaction checks pending; dropping the check of %s (the broker asks again)",
                len(self._checking),
                key,
            )
            return
        self._checking.add(key)
        self.received += 1
        task = asyncio.ensure_future(self._answer(connection.address, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Ignore further checks and cancel the ones in progress (the broker asks again)."""
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _answer(self, address: str, request: w.CheckTransactionRequest) -> None:
        view = to_view(request.message)
        try:
            async with self._slots:
                try:
                    resolution = await call_user(self._checker, view)
                except Exception:
                    log.exception(
                        "transaction checker failed for message %s; answering nothing (the "
                        "broker asks again)",
                        view.message_id,
                    )
                    return
            if resolution is None or resolution is TransactionResolution.UNKNOWN:
                return
            if not isinstance(resolution, TransactionResolution):
                log.error(
                    "transaction checker returned %r for message %s, not a "
                    "TransactionResolution; answering nothing",
                    resolution,
                    view.message_id,
                )
                return
            end = w.EndTransactionRequest(
                request.producer_group,
                view.message_id,
                request.transaction_id,
                resolution is TransactionResolution.COMMIT,
                True,
                request.message.physical_offset,
                view.topic,
            )
            try:
                await self._sender.run(EndTransaction(address, end))
                self.answered += 1
            except TransactionStateError as exc:
                self.late_answers += 1
                log.info("late check answer ignored by the broker: %s", exc)
            except PocketMQError as exc:
                log.warning("answering the check of %s failed: %s", view.message_id, exc)
        finally:
            self._checking.discard(request.transaction_id)
