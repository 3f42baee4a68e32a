"""Blocking wrappers for code that cannot use asyncio (scripts, the CLI, Spark drivers).

One event loop runs in a daemon thread; every blocking call submits the async implementation's
coroutine to it and waits. There is no second implementation to drift from the async one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Self, TypeVar

from pocketmq.client.admin import Admin
from pocketmq.client.admin_types import GroupInfo, QueueInfo, TopicChange, TopicInfo
from pocketmq.client.config import ClientConfig
from pocketmq.client.consumer.config import PushConsumerConfig
from pocketmq.client.consumer.push import PushConsumer
from pocketmq.client.consumer.simple import SimpleConsumer
from pocketmq.client.message import ConsumeStatus, Message, MessageView, SendResult
from pocketmq.client.producer import Producer, ProducerConfig
from pocketmq.client.producer.outcomes import (
    TransactionChecker,
    TransactionResolution,
    TransactionResult,
)
from pocketmq.client.producer.transaction import TransactionProducer

__all__ = [
    "LoopThread",
    "SyncAdmin",
    "SyncProducer",
    "SyncPushConsumer",
    "SyncSimpleConsumer",
    "SyncTransactionProducer",
]

T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread."""

    def __init__(self, name: str = "pocketmq-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; returns a future the calling thread can wait on."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (up to ``timeout``)."""
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        """Stop the loop and its thread."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


async def _build(factory: Callable[[], T]) -> T:
    return factory()  # objects with asyncio state must be created on the loop


class _SyncResource:
    def __init__(self, loop: LoopThread | None) -> None:
        self._own_loop = loop is None
        self._loop = loop or LoopThread()

    def _close_loop(self) -> None:
        if self._own_loop:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError


class SyncProducer(_SyncResource):
    """A :class:`Producer` for blocking code (scripts, the CLI, Spark drivers)."""

    def __init__(
        self,
        *,
        servers: Sequence[str] | str | None = None,
        config: ProducerConfig | None = None,
        client: ClientConfig | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        super().__init__(loop)
        self._producer = self._loop.run(
            _build(lambda: Producer(servers=servers, config=config, client=client))
        )
        self._loop.run(self._producer.start())

    def send(self, message: Message) -> SendResult:
        """Blocking :meth:`Producer.send`."""
        return self._loop.run(self._producer.send(message))

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Blocking :meth:`Producer.send_batch`."""
        return self._loop.run(self._producer.send_batch(messages))

    def send_oneway(self, message: Message) -> None:
        """Blocking :meth:`Producer.send_oneway`."""
        self._loop.run(self._producer.send_oneway(message))

    def send_async(self, message: Message) -> concurrent.futures.Future[SendResult]:
        """Start a send; the returned future completes in the background."""
        return self._loop.submit(self._producer.send(message))

    def close(self) -> None:
        """Close the producer (and the loop thread, if it owns it)."""
        self._loop.run(self._producer.aclose())
        self._close_loop()


class SyncTransactionProducer(_SyncResource):
    """A :class:`TransactionProducer` for blocking code.

    ``send_in_transaction`` runs the local transaction in the *calling* thread, so it can use the
    caller's database connection and transaction (thread-bound in most drivers). The checker runs
    in a worker thread of the producer's loop (it answers broker checks at any time).
    """

    def __init__(
        self,
        checker: TransactionChecker,
        *,
        topics: Sequence[str] = (),
        servers: Sequence[str] | str | None = None,
        config: ProducerConfig | None = None,
        client: ClientConfig | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        super().__init__(loop)
        self._producer = self._loop.run(
            _build(
                lambda: TransactionProducer(
                    checker, topics=topics, servers=servers, config=config, client=client
                )
            )
        )
        self._loop.run(self._producer.start())

    @property
    def producer(self) -> TransactionProducer:
        """The async producer underneath (its statistics, its pool)."""
        return self._producer

    def send_in_transaction(
        self, message: Message, local_transaction: Callable[[SendResult], TransactionResolution]
    ) -> TransactionResult:
        """Send the half message, run ``local_transaction`` here, then end the transaction
        (see :meth:`TransactionProducer.send_in_transaction`)."""
        result = self._loop.run(self._producer.send_half_message(message))
        resolution = local_transaction(result)
        if resolution is None:
            resolution = TransactionResolution.UNKNOWN
        confirmed = self._loop.run(self._producer.end_transaction(result, resolution))
        return TransactionResult(send_result=result, resolution=resolution, confirmed=confirmed)

    def send_half_message(self, message: Message) -> SendResult:
        """Blocking :meth:`TransactionProducer.send_half_message`."""
        return self._loop.run(self._producer.send_half_message(message))

    def end_transaction(
        self, result: SendResult | TransactionResult, resolution: TransactionResolution
    ) -> bool:
        """Blocking :meth:`TransactionProducer.end_transaction`."""
        return self._loop.run(self._producer.end_transaction(result, resolution))

    def send(self, message: Message) -> SendResult:
        """Blocking plain send."""
        return self._loop.run(self._producer.send(message))

    def close(self) -> None:
        """Close the producer (and the loop thread, if it owns it)."""
        self._loop.run(self._producer.aclose())
        self._close_loop()


class SyncSimpleConsumer(_SyncResource):
    """A :class:`SimpleConsumer` for blocking code."""

    def __init__(
        self,
        group: str,
        subscriptions: Mapping[str, str] | Sequence[str] | str,
        *,
        servers: Sequence[str] | str | None = None,
        client: ClientConfig | None = None,
        await_duration: float = 20.0,
        loop: LoopThread | None = None,
    ) -> None:
        super().__init__(loop)
        self._consumer = self._loop.run(
            _build(
                lambda: SimpleConsumer(
                    group,
                    subscriptions,
                    servers=servers,
                    client=client,
                    await_duration=await_duration,
                )
            )
        )
        self._loop.run(self._consumer.start())

    def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0
    ) -> list[MessageView]:
        """Blocking :meth:`SimpleConsumer.receive`."""
        return self._loop.run(self._consumer.receive(max_messages, invisible_duration))

    def ack(self, message: MessageView) -> None:
        """Blocking :meth:`SimpleConsumer.ack`."""
        self._loop.run(self._consumer.ack(message))

    def ack_many(self, messages: Sequence[MessageView]) -> None:
        """Blocking :meth:`SimpleConsumer.ack_many`."""
        self._loop.run(self._consumer.ack_many(messages))

    def change_invisible_duration(self, message: MessageView, seconds: float) -> MessageView:
        """Blocking :meth:`SimpleConsumer.change_invisible_duration`."""
        return self._loop.run(self._consumer.change_invisible_duration(message, seconds))

    def close(self) -> None:
        """Close the consumer (and the loop thread, if it owns it)."""
        self._loop.run(self._consumer.aclose())
        self._close_loop()


class SyncPushConsumer(_SyncResource):
    """A push consumer whose (blocking) listener runs in worker threads."""

    def __init__(
        self,
        group: str,
        subscriptions: Mapping[str, str] | Sequence[str] | str,
        listener: Callable[[list[MessageView]], ConsumeStatus | None],
        *,
        servers: Sequence[str] | str | None = None,
        config: PushConsumerConfig | None = None,
        client: ClientConfig | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        super().__init__(loop)
        self._consumer = self._loop.run(
            _build(
                lambda: PushConsumer(
                    group, subscriptions, listener, servers=servers, config=config, client=client
                )
            )
        )
        self._loop.run(self._consumer.start())

    @property
    def consumer(self) -> PushConsumer:
        """The async consumer underneath (its statistics, its queues)."""
        return self._consumer

    def close(self) -> None:
        """Close the consumer (and the loop thread, if it owns it)."""
        self._loop.run(self._consumer.aclose())
        self._close_loop()


class SyncAdmin(_SyncResource):
    """An :class:`Admin` for blocking code; :meth:`run` reaches every admin call."""

    def __init__(
        self,
        *,
        servers: Sequence[str] | str | None = None,
        client: ClientConfig | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        super().__init__(loop)
        self.admin = self._loop.run(_build(lambda: Admin(servers=servers, client=client)))

    def run(self, call: Callable[[Admin], Awaitable[T]]) -> T:
        """Run any :class:`Admin` coroutine: ``admin.run(lambda a: a.queues("t"))``."""

        async def invoke() -> T:
            return await call(self.admin)

        return self._loop.run(invoke())

    def create_topic(self, name: str, *, queues: int = 8, topic_type: str = "normal") -> bool:
        """Blocking :meth:`Admin.create_topic`."""
        return self.run(lambda a: a.create_topic(name, queues=queues, topic_type=topic_type))

    def update_topic(
        self,
        name: str,
        *,
        queues: int | None = None,
        topic_type: str | None = None,
        force: bool = False,
    ) -> list[TopicChange]:
        """Blocking :meth:`Admin.update_topic`."""
        return self.run(
            lambda a: a.update_topic(name, queues=queues, topic_type=topic_type, force=force)
        )

    def list_topics(self) -> list[TopicInfo]:
        """Blocking :meth:`Admin.list_topics`."""
        return self.run(lambda a: a.list_topics())

    def create_group(self, name: str, **options: Any) -> None:
        """Blocking :meth:`Admin.create_group`."""
        self.run(lambda a: a.create_group(name, **options))

    def list_groups(self) -> list[GroupInfo]:
        """Blocking :meth:`Admin.list_groups`."""
        return self.run(lambda a: a.list_groups())

    def queues(self, topic: str, group: str = "") -> list[QueueInfo]:
        """Blocking :meth:`Admin.queues`."""
        return self.run(lambda a: a.queues(topic, group))

    def close(self) -> None:
        """Close the admin client (and the loop thread, if it owns it)."""
        self._loop.run(self.admin.aclose())
        self._close_loop()
