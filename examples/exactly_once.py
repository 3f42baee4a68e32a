"""Exactly-once business effects with pocketmq's outbox and idempotent consumer, end to end.

    python examples/exactly_once.py                    # starts a broker; SQLite in a temp dir
    python examples/exactly_once.py --server 127.0.0.1:10911
    python examples/exactly_once.py postgresql+psycopg://postgres@127.0.0.1:5432/test

A real broker carries the message (the one at ``--server``, or a ``pocketmq serve`` process the
example starts and stops). The order and its message commit together in the outbox; the relay
sends the message through the SDK's ``Producer``; a ``PushConsumer`` hands it to the idempotent
consumer. Then the two duplicates an at-least-once system produces are provoked for real:

1. the consumer's acknowledgement is lost (the listener answers RECONSUME_LATER after the
   payment committed), so the broker delivers the message again;
2. the producer sends the message again with the same id, as it does when a send's answer is
   lost.

The message is delivered three times and the payment is recorded once.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, String, Table, func, select

from pocketmq import ConsumeStatus, Message, MessageView
from pocketmq.client import Admin, Producer, PushConsumer
from pocketmq.reliability import IdempotentConsumer, Outbox, SqlBackend, SqlTransaction
from pocketmq.testing import BrokerProcess

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


class LosesTheFirstAck:
    """Wraps the idempotent listener; its first answer "gets lost" (the broker redelivers)."""

    def __init__(self, listener: IdempotentConsumer[SqlTransaction]) -> None:
        self.listener = listener
        self.deliveries = 0
        self.delivered = asyncio.Event()

    async def __call__(self, messages: Sequence[MessageView]) -> ConsumeStatus:
        status = await self.listener(messages)
        self.deliveries += len(messages)
        self.delivered.set()
        if self.deliveries == 1 and status is ConsumeStatus.SUCCESS:
            return ConsumeStatus.RECONSUME_LATER  # handled and committed, but the ack is lost
        return status

    async def wait_for(self, deliveries: int, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while self.deliveries < deliveries:
                self.delivered.clear()
                await self.delivered.wait()


async def main(url: str, server: str) -> None:
    suffix = uuid.uuid4().hex[:8]  # fresh names: a shared broker may have run this before
    topic, group = f"order-paid-{suffix}", f"billing-{suffix}"
    async with Admin(servers=server) as admin:
        await admin.create_topic(topic, queues=2)
        await admin.create_group(group, retry_delays=[1.0])  # redeliver after 1 s
    async with SqlBackend.from_url(url) as backend:
        await backend.create_schema()  # message_stub + message_log
        async with backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
            await conn.run_sync(metadata.create_all)

        listener = LosesTheFirstAck(IdempotentConsumer(backend, record_payment, group=group))
        async with (
            Producer(servers=server) as producer,
            PushConsumer(group, topic, listener, servers=server),
            Outbox(backend, producer, group=group) as outbox,
        ):
            # 1. the business change and the message commit together; the relay sends it
            async with outbox.transaction() as tx:
                await tx.connection.execute(orders.insert().values(id=42, state="paid"))
                message = tx.add_message(Message(topic=topic, body=b"42"))
            # 2. delivered, paid, "ack lost": the broker delivers it again, a duplicate
            await listener.wait_for(2)
            # 3. the producer sends it again with the same id: another duplicate
            await producer.send(message)
            await listener.wait_for(3)

        async with backend.engine.connect() as conn:
            paid = await conn.scalar(select(func.count()).select_from(payments))
        stub = await backend.get_stub(message.message_id or "")
        assert paid == 1, paid
        assert stub is not None
        stats = listener.listener.statistics()
        print(
            f"message {message.message_id}: delivered {listener.deliveries} times, "
            f"payments recorded: {paid}, stub {stub.status.value}, "
            f"handled {stats.handled}, duplicates {stats.duplicates}"
        )
        async with backend.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
        await backend.drop_schema()


def run(url: str | None, server: str | None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        database = url or f"sqlite:///{directory}/example.db"
        if server is not None:
            asyncio.run(main(database, server))
            return
        with BrokerProcess(Path(directory) / "broker", grpc_port=None) as broker:
            asyncio.run(main(database, broker.native))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database", nargs="?", help="SQLAlchemy URL (default: SQLite, temporary)")
    parser.add_argument("--server", help="a running broker, host:port (default: start one)")
    arguments = parser.parse_args()
    run(arguments.database, arguments.server)
