"""Check-back: ask a live producer what became of a transaction nobody ended.

A transaction pending past its timeout is checked with a producer of its group (any live one:
the sender may be gone), then again every check interval, and discarded after the maximum number
of checks that reached a producer. While no producer of the group is connected, the broker tries
again every second without counting (docs/transactions.md §4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from pocketmq.broker.transactions.model import Pending, check_view
from pocketmq.broker.transactions.oplog import Op, make_op, op_message
from pocketmq.model.transactions import TransactionCheck

if TYPE_CHECKING:
    from pocketmq.broker.transactions.service import TransactionService

__all__ = ["CheckBack"]

log = logging.getLogger("pocketmq.broker")

_NO_PRODUCER_RETRY = 1.0


class CheckBack:
    """The check-back loop of one :class:`TransactionService`."""

    def __init__(self, service: TransactionService) -> None:
        self._service = service

    async def run(self) -> None:
        """The loop: expire silent producers, send the checks that are due, persist the state off
        the loop, and sleep until the next check is due or a producer arrives."""
        assert self._service.wake is not None
        while True:
            self._service.wake.clear()
            now = self._service.clock()
            delay = 1.0
            try:
                self._service.producers.expire(now)
                self.check_due(now)
                writes: list[tuple[str, bytes]] = []
                self._service.persist(sink=writes.append)
                await self._service.writer.write(writes)
                earliest = min(
                    (e.next_check_at for e in self._service.pending.values()), default=None
                )
                if earliest is not None:
                    delay = min(delay, max(0.0, earliest - self._service.clock()))
            except Exception:
                log.exception("transaction check-back failed; retrying in 1 s")
            self._service.wake_at = self._service.clock() + delay
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._service.wake.wait()

    def check_due(self, now: float) -> None:
        """Check back every transaction whose check is due; discard those out of checks."""
        due = sorted(
            (e for e in self._service.pending.values() if e.next_check_at <= now),
            key=lambda e: e.next_check_at,
        )
        if not due:
            return
        ops: list[Op] = []
        ended: list[tuple[Pending, Op]] = []
        for entry in due:
            if entry.checks >= self._service.check_max:
                detail = f"no outcome after {entry.checks} checks"
                op = make_op(entry, "discard", now, "broker", detail)
                ops.append(op)
                ended.append((entry, op))
                continue
            half = self._service.store.read_message(entry.half_offset)
            if half is None or half.message_id != entry.message_id:
                op = make_op(entry, "discard", now, "broker", "half message no longer stored")
                ops.append(op)
                ended.append((entry, op))
                continue
            number = entry.checks + 1
            check = TransactionCheck(
                entry.producer_group, entry.transaction_id, number, check_view(half, entry, number)
            )
            client = self._service.producers.deliver(entry.producer_group, check)
            if client is None:
                entry.next_check_at = now + min(self._service.interval, _NO_PRODUCER_RETRY)
                if not entry.waiting_since:
                    entry.waiting_since = now
                    self._service.counters["transaction_checks_without_producer"] += 1
                    log.warning(
                        "transaction %s (message %s) is due for a check but no producer of "
                        "group %r is connected; retrying every second",
                        entry.transaction_id,
                        entry.message_id,
                        entry.producer_group,
                    )
                continue
            entry.waiting_since = 0.0
            entry.checks = number
            entry.last_check_at = now
            entry.last_checked_by = client
            entry.next_check_at = now + self._service.interval
            ops.append(make_op(entry, "check", now, "broker", f"asked {client}"))
            self._service.counters["transaction_checks"] += 1
            self._service.record(entry, "TX_CHECK", attempt=number, consumer=client)
        if not ops:
            return
        # check records need no fsync wait: a lost one means one more check after a crash
        results = self._service.append([op_message(op) for op in ops])
        by_op = dict(zip((id(op) for op in ops), results, strict=True))
        for entry, op in ended:
            self._service.finish(entry, op, [by_op[id(op)]])
            self._service.counters["transactions_discarded"] += 1
            log.warning(
                "transaction %s (message %s, group %r) discarded: %s",
                entry.transaction_id,
                entry.message_id,
                entry.producer_group,
                op.detail,
            )
