"""The idempotent consumer wrapper over every backend (memory leases stand in for Redis here)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select

from pocketmq.client import ConsumeStatus, Message, MessageView
from pocketmq.reliability.backend import LeaseStore, ReliabilityBackend, Transaction
from pocketmq.reliability.backends.memory import MemoryLeaseStore
from pocketmq.reliability.backends.sql import SqlBackend, SqlTransaction
from pocketmq.reliability.clock import FakeClock
from pocketmq.reliability.idempotent import ConsumeOutcome, IdempotentConsumer
from pocketmq.reliability.stub import LogStatus, StubStatus

Backend = ReliabilityBackend[Any]


def view(message_id: str, offset: int = 0, attempt: int = 1) -> MessageView:
    return MessageView(
        message_id=message_id,
        topic="orders",
        queue_id=0,
        queue_offset=offset,
        body=b"pay 10",
        broker_name="b1",
        delivery_attempt=attempt,
    )


class Recorder:
    """A handler that counts runs and committed effects; can be told to fail."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.committed: Counter[str] = Counter()
        self.fail: set[str] = set()
        self.delay = 0.0

    async def __call__(self, message: MessageView, tx: Transaction) -> None:
        self.runs[message.message_id] += 1
        tx.on_commit(lambda: self.committed.update([message.message_id]))
        if self.delay:
            await asyncio.sleep(self.delay)
        if message.message_id in self.fail:
            raise RuntimeError("business rule failed")


async def outbox_message(backend: Backend) -> str:
    async with backend.transaction() as tx:
        m = tx.add_message(Message(topic="orders", body=b"pay 10"))
    assert m.message_id is not None
    return m.message_id


@pytest.mark.parametrize("with_leases", [True, False], ids=["lease", "db-only"])
async def test_runs_once_and_confirms(
    backend: Backend, clock: FakeClock, with_leases: bool
) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    leases = MemoryLeaseStore(clock=clock) if with_leases else None
    consumer = IdempotentConsumer(backend, handler, group="billing", leases=leases)
    assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
    if leases is not None:
        leases.expire_all()  # the duplicate must be caught by the database, not the lease
    assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
    assert await consumer.consume(view(mid)) is ConsumeOutcome.DUPLICATE
    assert handler.runs == Counter({mid: 1})
    assert handler.committed == Counter({mid: 1})
    stub = await backend.get_stub(mid)
    assert stub is not None
    assert stub.status is StubStatus.CONFIRMED
    entry = await backend.get_log("billing", mid)
    assert entry is not None
    assert (entry.status, entry.receive_count, entry.consumed_at) == (
        LogStatus.CONSUMED,
        3,
        clock.now(),
    )
    stats = consumer.statistics()
    assert (stats.received, stats.handled, stats.duplicates, stats.failed) == (3, 1, 2, 0)


async def test_failure_rolls_back_and_releases_the_lease(
    backend: Backend, clock: FakeClock
) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    handler.fail.add(mid)
    leases = MemoryLeaseStore(clock=clock)
    consumer = IdempotentConsumer(backend, handler, group="billing", leases=leases)
    assert await consumer([view(mid)]) is ConsumeStatus.RECONSUME_LATER
    assert handler.committed == Counter()
    stub = await backend.get_stub(mid)
    assert stub is not None
    assert stub.status is StubStatus.UNCONFIRMED
    entry = await backend.get_log("billing", mid)
    assert entry is not None
    assert entry.status is LogStatus.RECEIVED
    # the lease was given back: the redelivery is not mistaken for a busy duplicate
    handler.fail.clear()
    assert await consumer([view(mid, attempt=2)]) is ConsumeStatus.SUCCESS
    assert handler.runs == Counter({mid: 2})
    assert handler.committed == Counter({mid: 1})
    assert consumer.statistics().failed == 1


@pytest.mark.parametrize(
    ("busy_status", "expected"),
    [
        (ConsumeStatus.RECONSUME_LATER, ConsumeStatus.RECONSUME_LATER),
        (ConsumeStatus.SUCCESS, ConsumeStatus.SUCCESS),
    ],
)
async def test_busy_lease(
    backend: Backend,
    clock: FakeClock,
    busy_status: ConsumeStatus,
    expected: ConsumeStatus,
) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    leases = MemoryLeaseStore(clock=clock)
    assert await leases.acquire("billing", mid, 60.0) is not None  # someone else is on it
    consumer = IdempotentConsumer(
        backend, handler, group="billing", leases=leases, busy_status=busy_status
    )
    assert await consumer([view(mid)]) is expected
    assert handler.runs == Counter()
    assert consumer.statistics().busy == 1
    clock.advance(61)  # the holder's lease expires; its work never committed
    assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
    assert handler.committed == Counter({mid: 1})


class BrokenLeases(LeaseStore):
    async def acquire(self, group: str, message_id: str, ttl: float) -> str | None:
        raise ConnectionError("redis is down")

    async def release(self, group: str, message_id: str, token: str) -> bool:
        raise ConnectionError("redis is down")


async def test_lease_store_failure_falls_back_to_the_database(backend: Backend) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    consumer = IdempotentConsumer(backend, handler, group="billing", leases=BrokenLeases())
    assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
    assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
    assert handler.committed == Counter({mid: 1})
    assert consumer.statistics().lease_errors == 1  # the second one stopped at the log


async def test_confirmed_stub_stops_a_duplicate_after_log_pruning(
    backend: Backend, clock: FakeClock
) -> None:
    mid = await outbox_message(backend)
    async with backend.transaction() as tx:
        await tx.confirm_stub(mid, clock.now())  # consumed long ago; the log row is gone
    handler = Recorder()
    consumer = IdempotentConsumer(backend, handler, group="billing")
    assert await consumer.consume(view(mid)) is ConsumeOutcome.DUPLICATE
    assert handler.committed == Counter()  # it ran, found the stub confirmed, rolled back
    assert await consumer.consume(view(mid)) is ConsumeOutcome.DUPLICATE
    assert handler.runs == Counter({mid: 1})  # the log row now says CONSUMED
    entry = await backend.get_log("billing", mid)
    assert entry is not None
    assert entry.status is LogStatus.CONSUMED


async def test_without_stub_confirmation(backend: Backend) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    consumer = IdempotentConsumer(backend, handler, group="audit", confirm_stubs=False)
    assert await consumer([view(mid), view("not-from-the-outbox")]) is ConsumeStatus.SUCCESS
    assert handler.committed == Counter({mid: 1, "not-from-the-outbox": 1})
    stub = await backend.get_stub(mid)
    assert stub is not None
    assert stub.status is StubStatus.UNCONFIRMED


async def test_batch_stops_at_the_first_failure(backend: Backend) -> None:
    handler = Recorder()
    handler.fail.add("B")
    consumer = IdempotentConsumer(backend, handler, group="g")
    batch = [view("A", 0), view("B", 1), view("C", 2)]
    assert await consumer(batch) is ConsumeStatus.RECONSUME_LATER
    # SQL: the all-at-once attempt ran A and B and rolled back; then message by message
    at_once = isinstance(backend, SqlBackend)
    assert handler.runs == (Counter({"A": 2, "B": 2}) if at_once else Counter({"A": 1, "B": 1}))
    assert handler.committed == Counter({"A": 1})
    handler.fail.clear()
    assert await consumer(batch) is ConsumeStatus.SUCCESS
    assert handler.runs == (
        Counter({"A": 2, "B": 3, "C": 1}) if at_once else Counter({"A": 1, "B": 2, "C": 1})
    )
    assert handler.committed == Counter({"A": 1, "B": 1, "C": 1})


@pytest.mark.parametrize("with_leases", [True, False], ids=["lease", "db-only"])
async def test_concurrent_duplicates_commit_once(
    backend: Backend, clock: FakeClock, with_leases: bool
) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    handler.delay = 0.05
    leases = MemoryLeaseStore(clock=clock) if with_leases else None
    consumer = IdempotentConsumer(
        backend, handler, group="billing", leases=leases, busy_status=ConsumeStatus.SUCCESS
    )
    outcomes = await asyncio.gather(*(consumer.consume(view(mid)) for _ in range(4)))
    assert [o for o in outcomes if o is ConsumeOutcome.HANDLED] == [ConsumeOutcome.HANDLED]
    assert handler.committed == Counter({mid: 1})
    if with_leases:  # the lease keeps the racers from even running the handler
        assert handler.runs == Counter({mid: 1})
        assert {o.value for o in outcomes} <= {"BUSY", "DUPLICATE", "HANDLED"}


async def test_business_rows_commit_and_roll_back_with_the_claim(sql_backend: SqlBackend) -> None:
    metadata = MetaData()
    effects = Table(
        f"{sql_backend.tables.stub.name}_effects",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("message_id", String(64), nullable=False),
    )
    async with sql_backend.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        crash = {"yes": True}

        async def handle(message: MessageView, tx: SqlTransaction) -> None:
            await tx.connection.execute(effects.insert().values(message_id=message.message_id))
            if crash["yes"]:
                raise RuntimeError("crash after the effect, before the commit")

        mid = await outbox_message(sql_backend)
        consumer = IdempotentConsumer(sql_backend, handle, group="billing")
        assert await consumer([view(mid)]) is ConsumeStatus.RECONSUME_LATER
        crash["yes"] = False
        assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
        assert await consumer([view(mid)]) is ConsumeStatus.SUCCESS
        async with sql_backend.engine.connect() as conn:
            assert await conn.scalar(select(func.count()).select_from(effects)) == 1
    finally:
        async with sql_backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)


async def test_orm_session_shares_the_transaction(sql_backend: SqlBackend) -> None:
    metadata = MetaData()
    effects = Table(
        f"{sql_backend.tables.stub.name}_orm",
        metadata,
        Column("message_id", String(64), primary_key=True),
    )
    async with sql_backend.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:

        async def handle(message: MessageView, tx: SqlTransaction) -> None:
            await tx.session.execute(effects.insert().values(message_id=message.message_id))
            # the follow-up message is staged in the same transaction (consume-transform-produce)
            tx.add_message(Message(topic="receipts", body=message.body))

        consumer = IdempotentConsumer(sql_backend, handle, group="billing")
        assert await consumer([view("M-1")]) is ConsumeStatus.SUCCESS
        async with sql_backend.engine.connect() as conn:
            assert await conn.scalar(select(func.count()).select_from(effects)) == 1
        receipts = await sql_backend.list_stubs()
        assert [s.topic for s in receipts] == ["receipts"]
    finally:
        async with sql_backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)


async def test_same_message_twice_in_one_batch(backend: Backend, clock: FakeClock) -> None:
    mid = await outbox_message(backend)
    handler = Recorder()
    consumer = IdempotentConsumer(
        backend, handler, group="billing", leases=MemoryLeaseStore(clock=clock)
    )
    assert await consumer([view(mid), view(mid)]) is ConsumeStatus.SUCCESS
    assert handler.runs == Counter({mid: 1})
    entry = await backend.get_log("billing", mid)
    assert entry is not None
    assert entry.receive_count == 2
    assert consumer.statistics().duplicates == 1


@pytest.mark.parametrize("batch_transactions", [True, False], ids=["batch", "per-message"])
async def test_a_batch_commits_once_and_a_failing_message_rolls_back_alone(
    sql_backend: SqlBackend, batch_transactions: bool
) -> None:
    """One transaction for the batch (a savepoint per message): C's Core row, ORM row and outbox
    message vanish with C alone; A's and B's commit. The same outcome message by message, with
    one commit per message instead of one per batch."""
    metadata = MetaData()
    core = Table(f"{sql_backend.tables.stub.name}_core", metadata,
                 Column("message_id", String(64), primary_key=True))  # fmt: skip
    orm = Table(f"{sql_backend.tables.stub.name}_orm2", metadata,
                Column("message_id", String(64), primary_key=True))  # fmt: skip
    async with sql_backend.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    opened = Counter[str]()
    original = sql_backend.transaction

    def counting() -> Any:  # the handler transactions the consumer opens
        opened["all"] += 1
        return original()

    sql_backend.transaction = counting  # type: ignore[method-assign]
    try:
        failing = {"C"}

        async def handle(message: MessageView, tx: SqlTransaction) -> None:
            await tx.connection.execute(core.insert().values(message_id=message.message_id))
            await tx.session.execute(orm.insert().values(message_id=message.message_id))
            tx.add_message(Message(topic="receipts", body=message.message_id.encode()))
            if message.message_id in failing:
                raise RuntimeError("after every kind of write")

        consumer = IdempotentConsumer(
            sql_backend, handle, group="billing", batch_transactions=batch_transactions
        )
        batch = [view("A", 0), view("B", 1), view("C", 2)]
        assert await consumer(batch) is ConsumeStatus.RECONSUME_LATER
        # all at once (rolled back by C) then message by message in one, or one per message
        assert opened["all"] == (2 if batch_transactions else 3)
        async with sql_backend.engine.connect() as conn:
            assert sorted((await conn.execute(select(core.c.message_id))).scalars()) == ["A", "B"]
            assert sorted((await conn.execute(select(orm.c.message_id))).scalars()) == ["A", "B"]
        assert sorted(s.content for s in await sql_backend.list_stubs()) == [b"A", b"B"]
        statuses = {m: (await sql_backend.get_log("billing", m)) for m in "ABC"}
        assert {m: e.status if e else None for m, e in statuses.items()} == {
            "A": LogStatus.CONSUMED, "B": LogStatus.CONSUMED, "C": LogStatus.RECEIVED}  # fmt: skip
        failing.clear()
        assert await consumer(batch) is ConsumeStatus.SUCCESS
        async with sql_backend.engine.connect() as conn:
            assert sorted((await conn.execute(select(core.c.message_id))).scalars()) == [
                "A", "B", "C"]  # fmt: skip
        assert sorted(s.content for s in await sql_backend.list_stubs()) == [b"A", b"B", b"C"]
        stats = consumer.statistics()
        assert (stats.handled, stats.duplicates, stats.failed) == (3, 2, 1)
    finally:
        sql_backend.transaction = original  # type: ignore[method-assign]
        async with sql_backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)


async def test_a_mariadb_deadlock_inside_a_savepoint_loses_the_whole_batch(
    sql_backend: SqlBackend,
) -> None:
    """MariaDB rolls a deadlocked transaction back whole (then the savepoint is gone too): the
    consumer must not commit or count the rest of the batch. PostgreSQL and SQLite lose only
    the savepoint's part."""
    from sqlalchemy.exc import OperationalError

    class Driver(Exception):
        pass

    deadlock = OperationalError("UPDATE ...", None, Driver(1213, "Deadlock found"))
    gone = OperationalError("ROLLBACK TO SAVEPOINT", None, Driver(1305, "does not exist"))
    gone.__context__ = deadlock
    other = OperationalError("INSERT ...", None, Driver(1062, "Duplicate entry"))
    async with sql_backend.transaction() as tx:
        mysql = tx.connection.dialect.name in ("mysql", "mariadb")
        assert tx.lost_whole(deadlock) is mysql
        assert tx.lost_whole(gone) is mysql
        assert tx.lost_whole(other) is False
        assert tx.lost_whole(RuntimeError("business")) is False
