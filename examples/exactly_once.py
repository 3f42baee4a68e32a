"""Exactly-once business effects with pocketmq's outbox and idempotent consumer.

    python examples/exactly_once.py                 # a SQLite file in a temporary directory
    python examples/exactly_once.py postgresql+psycopg://postgres@127.0.0.1:5432/test

Until the SDK's producer and push consumer are wired in, an in-memory sender stands in for the
broker; with the real SDK, pass the ``Producer`` to the relay and the listener to the
``PushConsumer`` instead.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from sqlalchemy import Column, Integer, MetaData, String, Table, func, select

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.reliability import (
    IdempotentConsumer,
    InMemorySender,
    OutboxRelay,
    SqlBackend,
    SqlTransaction,
)

metadata = MetaData()
orders = Table(
    "example_orders",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("state", String(16), nullable=False),
)
payments = Table(
    "example_payments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("order_id", Integer, nullable=False),
    Column("amount", Integer, nullable=False),
)


async def record_payment(message: MessageView, tx: SqlTransaction) -> None:
    """The business handler: its writes commit together with the consumption record."""
    await tx.connection.execute(payments.insert().values(order_id=int(message.body), amount=100))


async def main(url: str) -> None:
    async with SqlBackend.from_url(url) as backend:
        await backend.create_schema()  # message_stub + message_log
        async with backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
            await conn.run_sync(metadata.create_all)

        # 1. producer: the business change and the outbox stub are one transaction
        async with backend.transaction() as tx:
            await tx.connection.execute(orders.insert().values(id=42, state="paid"))
            message = tx.add_message(Message(topic="order-paid", body=b"42"))

        # 2. the relay sends committed stubs (normally a background task: Outbox / OutboxRelay)
        broker = InMemorySender()
        await OutboxRelay(backend, broker).run_once()
        sent, stored = broker.sent[0]

        # 3. consumer: deliver the same message three times, as an at-least-once broker may
        listener = IdempotentConsumer(backend, record_payment, group="billing")
        delivery = MessageView(
            message_id=stored.message_id,
            topic=stored.topic,
            queue_id=stored.queue_id,
            queue_offset=stored.queue_offset,
            body=sent.body,
            broker_name=stored.broker_name,
        )
        for _ in range(3):
            assert await listener([delivery]) is ConsumeStatus.SUCCESS

        async with backend.engine.connect() as conn:
            paid = await conn.scalar(select(func.count()).select_from(payments))
        stub = await backend.get_stub(message.message_id or "")
        assert paid == 1
        assert stub is not None
        stats = listener.statistics()
        print(
            f"message {message.message_id}: delivered 3 times, payments recorded: {paid}, "
            f"stub {stub.status.value}, handled {stats.handled}, duplicates {stats.duplicates}"
        )
        async with backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
        await backend.drop_schema()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(main(f"sqlite:///{directory}/example.db"))
