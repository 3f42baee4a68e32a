"""A reusable chaos harness for the outbox + idempotent consumer, and a lossy broker stand-in.

The stand-in has the two shapes a real broker has from the toolkit's point of view: it is a
``MessageSender`` (``await broker.send(message) -> SendResult``) and it delivers batches to a
push-consumer listener (``await broker.deliver(listener)``), redelivering a batch when the listener
answers ``RECONSUME_LATER`` or raises. A real broker variant only needs those two methods.

Faults (seeded, so a failing run can be replayed): sends refused (not stored), sends with an
unknown outcome that were or were not stored, messages stored and then lost, batches delivered
twice. The harness adds producer crashes between commit and send (their stubs never see the relay),
handler crashes after writing effects (rolled back), and leases that expire early or vanish.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, UniqueConstraint, func, select

from pocketmq.client import ConsumeStatus, Message, MessageView, SendResult
from pocketmq.errors import BrokerConnectionError, SendOutcomeUnknownError
from pocketmq.reliability.backend import LeaseStore, ReliabilityBackend, Transaction
from pocketmq.reliability.backends.sql import SqlBackend, SqlTransaction
from pocketmq.reliability.clock import FakeClock
from pocketmq.reliability.idempotent import IdempotentConsumer
from pocketmq.reliability.outbox import OutboxRelay
from pocketmq.reliability.policy import ResendPolicy
from pocketmq.reliability.resend import ResendScheduler
from pocketmq.reliability.stub import LogStatus, StubStatus

Listener = Callable[[list[MessageView]], Awaitable[ConsumeStatus]]


@dataclass
class BrokerFaults:
    refuse: float = 0.05  # BrokerConnectionError, not stored
    unknown_lost: float = 0.05  # SendOutcomeUnknownError, not stored
    unknown_stored: float = 0.05  # SendOutcomeUnknownError, but stored
    drop_after_store: float = 0.10  # SendResult returned, then the broker loses it
    duplicate: float = 0.15  # a batch is delivered twice


@dataclass
class BrokerCounts:
    stored: int = 0
    refused: int = 0
    unknown: int = 0
    dropped: int = 0
    duplicated: int = 0
    redelivered: int = 0


class LossyBroker:
    """One broker, ``queues`` queues, in memory, with seeded faults that can be switched off."""

    def __init__(
        self,
        rng: random.Random,
        *,
        faults: BrokerFaults | None = None,
        queues: int = 4,
        broker_name: str = "lossy-broker",
    ) -> None:
        self.rng = rng
        self.faults: BrokerFaults | None = faults if faults is not None else BrokerFaults()
        self.queues = queues
        self.broker_name = broker_name
        self.pending: deque[MessageView] = deque()
        self.counts = BrokerCounts()
        self._offsets: Counter[tuple[str, int]] = Counter()

    def calm(self) -> None:
        """No more faults from now on (the storm is over)."""
        self.faults = None

    async def send(self, message: Message) -> SendResult:
        assert message.message_id, "the outbox always sends with its stable id"
        faults, roll = self.faults, self.rng.random()
        if faults is not None:
            if roll < faults.refuse:
                self.counts.refused += 1
                raise BrokerConnectionError("connection refused", address=self.broker_name)
            roll -= faults.refuse
            if roll < faults.unknown_lost:
                self.counts.unknown += 1
                raise SendOutcomeUnknownError("timed out", message_id=message.message_id)
            roll -= faults.unknown_lost
        queue_id = self.rng.randrange(self.queues)
        offset = self._offsets[(message.topic, queue_id)]
        self._offsets[(message.topic, queue_id)] += 1
        self.counts.stored += 1
        view = MessageView(
            message_id=message.message_id,
            topic=message.topic,
            queue_id=queue_id,
            queue_offset=offset,
            body=message.body,
            tag=message.tag,
            keys=message.keys,
            broker_name=self.broker_name,
        )
        if faults is not None and roll < faults.unknown_stored:
            self.counts.unknown += 1
            self.pending.append(view)
            raise SendOutcomeUnknownError(
                "stored, but the answer was lost", message_id=view.message_id
            )
        if faults is not None and roll < faults.unknown_stored + faults.drop_after_store:
            self.counts.dropped += 1  # acknowledged, never delivered
        else:
            self.pending.append(view)
        return SendResult(
            message_id=view.message_id,
            topic=view.topic,
            queue_id=queue_id,
            queue_offset=offset,
            broker_name=self.broker_name,
        )

    async def deliver(
        self, listener: Listener, *, batch_size: int = 8, concurrency: int = 4
    ) -> int:
        """Deliver everything pending once (batches in parallel); returns messages delivered."""
        batches: list[list[MessageView]] = []
        while self.pending:
            batch = [self.pending.popleft() for _ in range(min(batch_size, len(self.pending)))]
            batches.append(batch)
            if self.faults is not None and self.rng.random() < self.faults.duplicate:
                self.counts.duplicated += 1
                batches.append(list(batch))
        self.rng.shuffle(batches)
        semaphore = asyncio.Semaphore(concurrency)

        async def one(batch: list[MessageView]) -> None:
            async with semaphore:
                try:
                    status = await listener(batch)
                except Exception:
                    status = ConsumeStatus.RECONSUME_LATER
                if status is not ConsumeStatus.SUCCESS:
                    self.counts.redelivered += len(batch)
                    for view in batch:  # back through the retry topic, one attempt later
                        self.pending.append(
                            MessageView(
                                message_id=view.message_id,
                                topic=view.topic,
                                queue_id=view.queue_id,
                                queue_offset=view.queue_offset,
                                body=view.body,
                                tag=view.tag,
                                keys=view.keys,
                                broker_name=view.broker_name,
                                delivery_attempt=view.delivery_attempt + 1,
                            )
                        )

        await asyncio.gather(*(one(b) for b in batches))
        return sum(len(b) for b in batches)


class HandlerCrash(Exception):
    """The consumer process "dies" after writing its effects, before the commit."""


class CrashingHandler:
    """The business handler under chaos: applies the order inside the consumer's transaction,
    crashes at random while the storm lasts, and counts runs and commits per message."""

    def __init__(self, business: ChaosBusiness, rng: random.Random, crash_rate: float) -> None:
        self.business = business
        self.rng = rng
        self.crash_rate = crash_rate
        self.runs: Counter[str] = Counter()
        self.committed: Counter[str] = Counter()
        self.crashes = 0
        self.storm = True

    async def __call__(self, message: MessageView, tx: Transaction) -> None:
        self.runs[message.message_id] += 1
        await self.business.apply(message, tx)
        if self.storm and self.rng.random() < self.crash_rate:
            self.crashes += 1
            raise HandlerCrash(message.message_id)
        tx.on_commit(lambda: self.committed.update([message.message_id]))


@dataclass
class ChaosConfig:
    seed: int = 1
    producers: int = 4
    messages_per_producer: int = 25
    crashing_producers: int = 1  # commit, then die before the relay sends
    handler_crash_rate: float = 0.15
    lease_ttl: float = 60.0
    forget_leases_rate: float = 0.3  # chance per round that the lease store loses its keys
    storm_rounds: int = 8
    max_rounds: int = 200
    step_seconds: float = 30.0
    policy: ResendPolicy = field(
        default_factory=lambda: ResendPolicy(
            max_sends=50, base_interval=30.0, multiplier=1.5, max_interval=300.0, offset_wait=60.0
        )
    )


@dataclass
class ChaosResult:
    rounds: int
    messages: int
    handler_runs: Counter[str]
    committed: Counter[str]
    crashes: int
    broker: BrokerCounts
    resends: int
    business_counts: tuple[int, int, list[tuple[str, int]], int]


class ChaosBusiness:
    """The business side: an ``orders`` table on the producer, effects + ledger on the consumer.

    Every message adds a ``ledger`` row, which has no unique constraint, so a duplicate
    application shows up there as a second row. Half of the messages (by id) also insert into
    ``effects``, which has the classic unique constraint on message_id — only half, because that
    constraint would otherwise mask a broken claim by failing the duplicate's transaction.
    """

    def __init__(self, backend: ReliabilityBackend[Any]) -> None:
        self.backend = backend
        self.sql = backend if isinstance(backend, SqlBackend) else None
        base = self.sql.tables.stub.name if self.sql is not None else "mem"
        self.metadata = MetaData()
        self.orders = Table(
            f"{base}_orders",
            self.metadata,
            Column("id", Integer, primary_key=True, autoincrement=False),
            Column("message_id", String(64), nullable=False),
        )
        self.effects = Table(
            f"{base}_effects",
            self.metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("message_id", String(64), nullable=False),
            UniqueConstraint("message_id", name=f"uq_{base}_effects"),
        )
        self.ledger = Table(
            f"{base}_ledger",
            self.metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("message_id", String(64), nullable=False),
        )
        self.memory_orders: list[str] = []

    async def create(self) -> None:
        if self.sql is not None:
            async with self.sql.engine.begin() as conn:
                await conn.run_sync(self.metadata.create_all)

    async def drop(self) -> None:
        if self.sql is not None:
            async with self.sql.engine.begin() as conn:
                await conn.run_sync(self.metadata.drop_all)

    async def place_order(self, order_id: int) -> str:
        async with self.backend.transaction() as tx:
            message = tx.add_message(Message(topic="orders", body=f"order {order_id}".encode()))
            assert message.message_id is not None
            if isinstance(tx, SqlTransaction):
                await tx.connection.execute(
                    self.orders.insert().values(id=order_id, message_id=message.message_id)
                )
            else:
                tx.on_commit(lambda: self.memory_orders.append(message.message_id or ""))
        return message.message_id

    async def apply(self, message: MessageView, tx: Transaction) -> None:
        if isinstance(tx, SqlTransaction):
            await tx.connection.execute(self.ledger.insert().values(message_id=message.message_id))
            if self.guarded(message.message_id):
                await tx.connection.execute(
                    self.effects.insert().values(message_id=message.message_id)
                )

    @staticmethod
    def guarded(message_id: str) -> bool:
        return int(message_id[-1], 16) % 2 == 0

    async def counts(self) -> tuple[int, int, list[tuple[str, int]], int]:
        """orders, effects, ledger rows per message id seen more than once, ledger total."""
        if self.sql is None:
            return len(self.memory_orders), -1, [], -1
        async with self.sql.engine.connect() as conn:
            orders = await conn.scalar(select(func.count()).select_from(self.orders))
            effects = await conn.scalar(select(func.count()).select_from(self.effects))
            ledger = await conn.scalar(select(func.count()).select_from(self.ledger))
            doubled = (
                await conn.execute(
                    select(self.ledger.c.message_id, func.count())
                    .group_by(self.ledger.c.message_id)
                    .having(func.count() > 1)
                )
            ).all()
        return (
            int(orders or 0),
            int(effects or 0),
            [(m, int(c)) for m, c in doubled],
            int(ledger or 0),
        )


async def run_chaos(
    backend: ReliabilityBackend[Any],
    *,
    clock: FakeClock,
    config: ChaosConfig,
    leases: LeaseStore | None,
    forget_leases: Callable[[], Awaitable[None]] | None = None,
    broker: LossyBroker | None = None,
) -> ChaosResult:
    rng = random.Random(config.seed)
    broker = broker if broker is not None else LossyBroker(random.Random(config.seed + 1))
    business = ChaosBusiness(backend)
    await business.create()
    try:
        return await _run(backend, business, broker, rng, clock, config, leases, forget_leases)
    finally:
        await business.drop()


async def _run(
    backend: ReliabilityBackend[Any],
    business: ChaosBusiness,
    broker: LossyBroker,
    rng: random.Random,
    clock: FakeClock,
    config: ChaosConfig,
    leases: LeaseStore | None,
    forget_leases: Callable[[], Awaitable[None]] | None,
) -> ChaosResult:
    handle = CrashingHandler(business, rng, config.handler_crash_rate)

    consumer = IdempotentConsumer(
        backend, handle, group="chaos-consumer", leases=leases, lease_ttl=config.lease_ttl
    )
    relay = OutboxRelay(backend, broker, policy=config.policy)
    scheduler = ResendScheduler(
        backend, broker, group="chaos-consumer", policy=config.policy, alerts=()
    )

    # producers: the healthy ones commit and their relay sends at once ...
    order_ids = iter(range(1, 1_000_000))
    ids: list[str] = []

    async def produce(n: int) -> list[str]:
        return [await business.place_order(next(order_ids)) for _ in range(n)]

    healthy = config.producers - config.crashing_producers
    for batch in await asyncio.gather(
        *(produce(config.messages_per_producer) for _ in range(healthy))
    ):
        ids.extend(batch)
    await relay.run_once()
    # ... the crashing ones commit and die before any relay runs for them
    for _ in range(config.crashing_producers):
        ids.extend(await produce(config.messages_per_producer))

    total = len(ids)
    first_sends = broker.counts.stored + broker.counts.refused + broker.counts.unknown
    rounds = 0
    for rounds in range(1, config.max_rounds + 1):
        await broker.deliver(consumer)
        if forget_leases is not None and handle.storm and rng.random() < config.forget_leases_rate:
            await forget_leases()
        await scheduler.run_once()
        if not broker.pending:
            confirmed = await backend.list_stubs(status=StubStatus.CONFIRMED, limit=total + 1)
            if len(confirmed) == total:
                break
        if rounds == config.storm_rounds:
            handle.storm = False
            broker.calm()
        clock.advance(config.step_seconds)
    attempts = broker.counts.stored + broker.counts.refused + broker.counts.unknown
    return ChaosResult(
        rounds=rounds,
        messages=total,
        handler_runs=handle.runs,
        committed=handle.committed,
        crashes=handle.crashes,
        broker=broker.counts,
        resends=attempts - first_sends,
        business_counts=await business.counts(),
    )


async def assert_exactly_once(backend: ReliabilityBackend[Any], result: ChaosResult) -> None:
    stubs = await backend.list_stubs(limit=result.messages + 10)
    assert len(stubs) == result.messages
    assert {s.status for s in stubs} == {StubStatus.CONFIRMED}, Counter(s.status for s in stubs)
    ids = {s.message_id for s in stubs}
    assert set(result.committed) == ids
    assert set(result.committed.values()) == {1}, "a handler committed twice"
    log = await backend.list_log(group="chaos-consumer", limit=result.messages + 10)
    assert {e.message_id for e in log} == ids
    assert {e.status for e in log} == {LogStatus.CONSUMED}
    orders, effects, doubled, ledger = result.business_counts
    assert orders == result.messages
    if effects >= 0:
        assert effects == sum(1 for i in ids if ChaosBusiness.guarded(i))
        assert ledger == result.messages
        assert doubled == []
