"""Relay, resend scheduler and manual handling, timed by a fake clock (no sleeping for timing)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from pocketmq.client import Message, SendResult
from pocketmq.errors import (
    BrokerConnectionError,
    InvalidArgumentError,
    SendOutcomeUnknownError,
    TooManyRequestsError,
)
from pocketmq.reliability.alerts import ManualHandlingEvent
from pocketmq.reliability.backend import ReliabilityBackend
from pocketmq.reliability.clock import FakeClock
from pocketmq.reliability.dispatch import SendAttempt
from pocketmq.reliability.outbox import Outbox, OutboxRelay
from pocketmq.reliability.policy import ResendPolicy
from pocketmq.reliability.resend import ResendScheduler
from pocketmq.reliability.sender import InMemorySender, MessageSender
from pocketmq.reliability.stub import MessageStub, StubStatus

from .test_backend_contract import view

Backend = ReliabilityBackend[Any]


async def add(backend: Backend, n: int = 1) -> list[str]:
    ids = []
    async with backend.transaction() as tx:
        for i in range(n):
            m = tx.add_message(Message(topic="orders", body=f"m{i}".encode()))
            assert m.message_id is not None
            ids.append(m.message_id)
    return ids


async def get(backend: Backend, message_id: str) -> MessageStub:
    stub = await backend.get_stub(message_id)
    assert stub is not None
    return stub


class FlakySender(InMemorySender):
    """Raises the queued exceptions first, then behaves like InMemorySender."""

    def __init__(self, *errors: Exception, by_id: dict[str, Exception] | None = None) -> None:
        super().__init__(broker_name="b1", queues=1)
        self.errors = list(errors)
        self.by_id = dict(by_id or {})
        self.attempts = 0

    async def send(self, message: Message) -> SendResult:
        self.attempts += 1
        if message.message_id in self.by_id:
            raise self.by_id.pop(message.message_id)
        if self.errors:
            raise self.errors.pop(0)
        return await super().send(message)


class RecordingAlert:
    def __init__(self, fail: int = 0) -> None:
        self.events: list[ManualHandlingEvent] = []
        self.fail = fail

    async def notify(self, event: ManualHandlingEvent) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("pager is down")
        self.events.append(event)


class FixedBacklog:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.asked: list[tuple[str, str, int]] = []

    async def estimated_delay(self, topic: str, broker_name: str, queue_id: int) -> float:
        self.asked.append((topic, broker_name, queue_id))
        return self.seconds


def test_policy_intervals_and_validation() -> None:
    policy = ResendPolicy()
    assert [policy.interval(n) for n in range(1, 6)] == [30, 60, 120, 240, 480]
    assert policy.interval(0) == 30
    assert policy.interval(1000) == 3600
    capped = ResendPolicy(base_interval=10, multiplier=3, max_interval=50)
    assert [capped.interval(n) for n in (1, 2, 3)] == [10, 30, 50]
    for bad in (
        {"max_sends": 0},
        {"base_interval": 0},
        {"base_interval": 10, "max_interval": 5},
        {"multiplier": 0.5},
        {"claim_timeout": 0},
        {"offset_wait": -1},
    ):
        with pytest.raises(InvalidArgumentError):
            ResendPolicy(**bad)


async def test_relay_sends_never_sent_stubs(backend: Backend, clock: FakeClock) -> None:
    ids = await add(backend, 3)
    sender = InMemorySender(broker_name="b1", queues=2)
    relay = OutboxRelay(backend, sender, batch_size=2)  # two pages
    counts = await relay.run_once()
    assert counts[SendAttempt.SENT] == 3
    assert sorted(m.message_id or "" for m, _ in sender.sent) == sorted(ids)  # ids kept
    for message, result in sender.sent:
        assert message.message_id is not None
        stub = await get(backend, message.message_id)
        assert stub.send_count == 1
        assert (stub.broker_name, stub.queue_id, stub.queue_offset) == (
            "b1",
            result.queue_id,
            result.queue_offset,
        )
        assert stub.next_resend_at == clock.now() + timedelta(seconds=30)
        assert stub.status is StubStatus.UNCONFIRMED
    assert (await relay.run_once())[SendAttempt.SENT] == 0


async def test_relay_records_unknown_and_failed_sends(backend: Backend, clock: FakeClock) -> None:
    unknown_id, failed_id = await add(backend, 2)
    sender = FlakySender(
        by_id={
            unknown_id: SendOutcomeUnknownError("timed out", message_id=unknown_id),
            failed_id: BrokerConnectionError("refused"),
        }
    )
    counts = await OutboxRelay(backend, sender).run_once()
    assert (counts[SendAttempt.UNKNOWN], counts[SendAttempt.FAILED]) == (1, 1)
    unknown, failed = await get(backend, unknown_id), await get(backend, failed_id)
    assert (unknown.status, unknown.send_count, unknown.queue_offset) == (
        StubStatus.UNKNOWN,
        1,
        None,
    )
    assert unknown.last_error is not None
    assert unknown.last_error.startswith("SendOutcomeUnknownError")
    assert (failed.status, failed.send_count) == (StubStatus.UNCONFIRMED, 1)
    # the scheduler resends both once due: the same ids, the UNKNOWN one becomes UNCONFIRMED
    scheduler = ResendScheduler(backend, sender, group="g", alerts=())
    assert (await scheduler.run_once()).attempted == 0
    clock.advance(30)
    report = await scheduler.run_once()
    assert report.sent == 2
    assert sorted(m.message_id or "" for m, _ in sender.sent) == sorted([unknown_id, failed_id])
    resent = await get(backend, unknown_id)
    assert (resent.status, resent.send_count) == (StubStatus.UNCONFIRMED, 2)
    assert resent.queue_offset in (0, 1)
    assert resent.next_resend_at == clock.now() + timedelta(seconds=60)


async def test_concurrent_relays_send_each_stub_once(backend: Backend) -> None:
    ids = await add(backend, 20)
    sender = InMemorySender()
    relays = [OutboxRelay(backend, sender, batch_size=5) for _ in range(3)]
    await asyncio.gather(*(r.run_once() for r in relays))
    assert sorted(m.message_id or "" for m, _ in sender.sent) == sorted(ids)


async def test_crash_between_commit_and_send_is_recovered(
    backend: Backend, clock: FakeClock
) -> None:
    (mid,) = await add(backend)
    # a relay claimed the stub and died before sending: the claim runs out
    stub = await get(backend, mid)
    assert await backend.claim_stub(
        stub, until=clock.now() + timedelta(seconds=30), now=clock.now()
    )
    sender = InMemorySender()
    relay = OutboxRelay(backend, sender)
    assert (await relay.run_once())[SendAttempt.SENT] == 0
    clock.advance(30)
    assert (await relay.run_once())[SendAttempt.SENT] == 1
    assert (await get(backend, mid)).send_count == 1


async def test_resend_waits_for_the_interval_and_the_backlog(
    backend: Backend, clock: FakeClock
) -> None:
    (mid,) = await add(backend)
    sender = InMemorySender(broker_name="b1", queues=1)
    backlog = FixedBacklog(15.0)
    await OutboxRelay(backend, sender, estimator=backlog).run_once()
    assert backlog.asked == [("orders", "b1", 0)]
    assert (await get(backend, mid)).next_resend_at == clock.now() + timedelta(seconds=45)
    # the consumer logged a later offset on the same queue: our message was lost
    await backend.log_receipt("g", view("later", offset=5), clock.now())
    scheduler = ResendScheduler(backend, sender, group="g", estimator=backlog, alerts=())
    clock.advance(44)
    assert (await scheduler.run_once()).attempted == 0
    clock.advance(1)
    assert (await scheduler.run_once()).sent == 1
    stub = await get(backend, mid)
    assert stub.send_count == 2
    assert stub.queue_offset == 1
    assert stub.next_resend_at == clock.now() + timedelta(seconds=60 + 15)


async def test_no_resend_while_the_consumer_is_behind(backend: Backend, clock: FakeClock) -> None:
    (mid,) = await add(backend)
    sender = InMemorySender(broker_name="b1", queues=1)
    for _ in range(4):  # fill the queue so our stub lands at offset 4
        await sender.send(Message(topic="orders", body=b"", message_id="filler"))
    await OutboxRelay(backend, sender).run_once()
    assert (await get(backend, mid)).queue_offset == 4
    await backend.log_receipt("g", view("filler", offset=2), clock.now())
    policy = ResendPolicy(offset_wait=300.0)
    scheduler = ResendScheduler(backend, sender, group="g", policy=policy, alerts=())
    clock.advance(30)
    assert (await scheduler.run_once()).attempted == 0  # only queued behind a backlog
    clock.advance(299)
    assert (await scheduler.run_once()).attempted == 0
    clock.advance(1)  # offset_wait after the resend time: resend anyway (liveness)
    assert (await scheduler.run_once()).sent == 1
    # and once the consumer logs it, nothing is resent any more
    await backend.log_receipt("g", view(mid, offset=4), clock.now())
    clock.advance(3600)
    assert (await scheduler.run_once()).attempted == 0


async def test_exhausted_stubs_alert_once(backend: Backend, clock: FakeClock) -> None:
    (mid,) = await add(backend)
    sender = FlakySender(*(BrokerConnectionError("down") for _ in range(10)))
    alert = RecordingAlert(fail=1)
    policy = ResendPolicy(max_sends=3, base_interval=10, multiplier=1)
    await OutboxRelay(backend, sender, policy=policy).run_once()
    scheduler = ResendScheduler(backend, sender, group="g", policy=policy, alerts=[alert])
    for _ in range(2):
        clock.advance(10)
        assert (await scheduler.run_once()).failed == 1
    assert sender.attempts == 3
    assert (await scheduler.run_once()).alerted == 0  # the last send gets its interval first
    clock.advance(10)
    report = await scheduler.run_once()
    assert (report.attempted, report.alerted, report.alert_failures) == (0, 0, 1)
    assert not (await get(backend, mid)).alerted  # undone: the pager was down
    report = await scheduler.run_once()
    assert report.alerted == 1
    assert [e.stub.message_id for e in alert.events] == [mid]
    event = alert.events[0]
    assert event.to_dict()["send_count"] == 3
    assert "manual handling" in event.summary
    stub = await get(backend, mid)
    assert stub.alerted
    assert stub.last_error == "manual: 3 sends, still UNCONFIRMED"
    clock.advance(3600)
    assert (await scheduler.run_once()).alerted == 0
    assert sender.attempts == 3


async def test_one_broken_alert_hook_neither_silences_nor_repeats_the_others(
    backend: Backend, clock: FakeClock
) -> None:
    (mid,) = await add(backend)
    sender = FlakySender(*(BrokerConnectionError("down") for _ in range(10)))
    working, broken = RecordingAlert(), RecordingAlert(fail=1000)
    policy = ResendPolicy(max_sends=1, base_interval=10, multiplier=1)
    await OutboxRelay(backend, sender, policy=policy).run_once()
    scheduler = ResendScheduler(backend, sender, group="g", policy=policy, alerts=[broken, working])
    clock.advance(10)
    report = await scheduler.run_once()
    assert (report.alerted, report.alert_failures) == (1, 0)
    assert (await get(backend, mid)).alerted
    for _ in range(3):
        clock.advance(10)
        assert (await scheduler.run_once()).alerted == 0
    assert [e.stub.message_id for e in working.events] == [mid]
    assert broken.events == []


async def test_outbox_wakes_the_relay_after_commit(backend: Backend) -> None:
    sender = InMemorySender()
    async with Outbox(backend, sender, poll_interval=30.0, run_scheduler=False) as outbox:
        await asyncio.sleep(0.05)  # the first (empty) poll
        async with outbox.transaction() as tx:
            message = tx.add_message(Message(topic="orders", body=b"paid"))
        for _ in range(200):
            if sender.sent:
                break
            await asyncio.sleep(0.01)
    assert [m.message_id for m, _ in sender.sent] == [message.message_id]
    assert outbox.relay.lifecycle.value == "CLOSED"


async def test_background_scheduler_survives_a_failing_step(clock: FakeClock) -> None:
    from pocketmq.reliability.backends.memory import MemoryBackend

    class Exploding(MemoryBackend):
        calls = 0

        async def stubs_for_resend(self, *args: Any, **kwargs: Any) -> list[MessageStub]:
            self.calls += 1
            raise ConnectionError("database restarting")

    backend = Exploding(clock=clock)
    scheduler = ResendScheduler(backend, InMemorySender(), group=None, interval=0.01)
    async with scheduler:
        for _ in range(100):
            if backend.calls >= 3:
                break
            await asyncio.sleep(0.01)
    assert backend.calls >= 3


async def test_in_memory_sender_fails_the_ids_it_is_told_to() -> None:
    """The one test double of the relay, the scheduler and the Spark resend job."""
    refused = TooManyRequestsError("busy")
    sender = InMemorySender(fail={"bad": refused}, queues=2)
    ok = await sender.send(Message(topic="t", body=b"1", message_id="good"))
    with pytest.raises(TooManyRequestsError):
        await sender.send(Message(topic="t", body=b"2", message_id="bad"))
    with pytest.raises(TooManyRequestsError):  # every time, not once
        await sender.send(Message(topic="t", body=b"2", message_id="bad"))
    assert [m.message_id for m in sender.messages] == ["good"]
    assert sender.sent == [(sender.messages[0], ok)]
    assert isinstance(sender, MessageSender)
