"""Idempotent-consumption throughput: ``pocketmq bench idempotent`` (or
``python -m pocketmq.bench.reliability``).

Why it exists: the idempotent consumer's cost is database round trips per message, and only a
measurement against the real databases says whether a change (one receipt upsert per batch,
autocommit single statements) helped; docs/benchmarks.md "Reliability toolkit" has the figures.

What it measures: messages per second through :class:`IdempotentConsumer`, end to end on one
event loop — receipt logged, Redis lease (when configured), handler inserting one business row,
conditional log update and stub confirmation committed together. Each message has an outbox stub
beforehand, as in production. A second pass redelivers every message to measure how fast
duplicates are turned away. Tables get a unique prefix and are dropped afterwards.

:func:`run_benchmark` returns the figures; :func:`main` is the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from pocketmq.client import Message, MessageView
from pocketmq.reliability.backends.redis import DEFAULT_REDIS_URL, RedisLeaseStore
from pocketmq.reliability.backends.sql import SqlBackend, SqlTransaction
from pocketmq.reliability.idempotent import Handler, IdempotentConsumer

if TYPE_CHECKING:
    from sqlalchemy import MetaData, Table

__all__ = ["IdempotentBenchResult", "main", "run_benchmark"]


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotentBenchResult:
    """One run's figures: first deliveries and redelivered duplicates, per second."""

    database: str
    redis: bool
    messages: int
    batch_size: int
    concurrency: int
    seconds: float
    messages_per_second: float
    duplicate_seconds: float
    duplicates_per_second: float
    batch_transactions: bool = True


async def run_benchmark(
    *,
    url: str,
    redis_url: str | None = None,
    messages: int = 5000,
    batch_size: int = 32,
    concurrency: int = 4,
    batch_transactions: bool = True,
) -> IdempotentBenchResult:
    """Consume ``messages`` once, then all of them again as duplicates; time both passes."""
    from sqlalchemy import MetaData

    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    backend = SqlBackend.from_url(url, table_prefix=prefix, pool_size=max(5, concurrency + 1))
    metadata = MetaData()
    orders = _orders_table(backend, metadata)
    leases = (
        RedisLeaseStore.from_url(redis_url, prefix=f"pocketmq:bench:{prefix}:")
        if redis_url
        else None
    )
    await backend.create_schema()
    async with backend.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        views = await _outbox_messages(backend, messages)
        consumer = IdempotentConsumer(
            backend,
            _order_handler(orders),
            group="bench",
            leases=leases,
            batch_transactions=batch_transactions,
        )
        batches = [views[i : i + batch_size] for i in range(0, len(views), batch_size)]
        first = await _deliver_all(consumer, batches, concurrency)
        stats = consumer.statistics()
        if stats.handled != messages:
            raise RuntimeError(f"benchmark handled {stats.handled} of {messages}: {stats}")
        second = await _deliver_all(consumer, batches, concurrency)
    finally:
        async with backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
        await backend.drop_schema()
        await backend.aclose()
        if leases is not None:
            await leases.aclose()
    return IdempotentBenchResult(
        database=backend.engine.dialect.name,
        redis=leases is not None,
        messages=messages,
        batch_size=batch_size,
        concurrency=concurrency,
        seconds=round(first, 3),
        messages_per_second=round(messages / first, 1),
        duplicate_seconds=round(second, 3),
        duplicates_per_second=round(messages / second, 1),
        batch_transactions=batch_transactions,
    )


def _orders_table(backend: SqlBackend, metadata: MetaData) -> Table:
    """The business table the handler inserts into, beside the benchmark's own outbox tables."""
    from sqlalchemy import Column, Integer, String, Table

    return Table(
        f"{backend.tables.stub.name}_orders",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("message_id", String(64), nullable=False, unique=True),
        Column("amount", Integer, nullable=False),
    )


def _order_handler(orders: Table) -> Handler[SqlTransaction]:
    """The application's work: one business row per message, in the consumer's transaction."""

    async def handle(message: MessageView, tx: SqlTransaction) -> None:
        await tx.connection.execute(orders.insert().values(message_id=message.message_id, amount=1))

    return handle


async def _outbox_messages(backend: SqlBackend, messages: int) -> list[MessageView]:
    """Give each message an outbox stub (500 per transaction), as in production, and return
    them as the consumer would receive them."""
    ids: list[str] = []
    for start in range(0, messages, 500):
        async with backend.transaction() as tx:
            for i in range(start, min(start + 500, messages)):
                m = tx.add_message(Message(topic="bench", body=f"order {i}".encode()))
                ids.append(m.message_id or "")
    return [
        MessageView(
            message_id=mid,
            topic="bench",
            queue_id=i % 8,
            queue_offset=i // 8,
            body=b"order",
            broker_name="bench-broker",
        )
        for i, mid in enumerate(ids)
    ]


async def _deliver_all(
    consumer: IdempotentConsumer[SqlTransaction],
    batches: list[list[MessageView]],
    concurrency: int,
) -> float:
    """Deliver every batch through ``concurrency`` workers; the seconds it took."""
    queue: asyncio.Queue[list[MessageView]] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)

    async def worker() -> None:
        while not queue.empty():
            batch = queue.get_nowait()
            await consumer(batch)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    """The command line: parse ``argv``, run once, print a line (or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="pocketmq bench idempotent", description="Idempotent-consumption throughput."
    )
    parser.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--redis", default=DEFAULT_REDIS_URL, help="Redis URL, or 'none' for database-only mode"
    )
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--per-message",
        action="store_true",
        help="one transaction per message (the default is one per delivered batch)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(
        run_benchmark(
            url=args.url,
            redis_url=None if args.redis == "none" else args.redis,
            messages=args.messages,
            batch_size=args.batch_size,
            concurrency=args.concurrency,
            batch_transactions=not args.per_message,
        )
    )
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        mode = "redis + db" if result.redis else "db only"
        mode += ", one transaction per " + ("batch" if result.batch_transactions else "message")
        print(
            f"{result.database} ({mode}), {result.messages} messages, batch {result.batch_size}, "
            f"concurrency {result.concurrency}: {result.messages_per_second:.0f} msg/s "
            f"({result.seconds:.2f} s); duplicates: {result.duplicates_per_second:.0f} msg/s"
        )


if __name__ == "__main__":
    main()
