"""The backend contract: one suite, run against memory, SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from pocketmq.client import Message, MessageView, SendResult
from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.backend import ReliabilityBackend, StubConfirmation
from pocketmq.reliability.clock import FakeClock
from pocketmq.reliability.errors import DuplicateMessageIdError, StubNotFoundError, StubStateError
from pocketmq.reliability.stub import PENDING_STATUSES, LogStatus, MessageStub, StubStatus

Backend = ReliabilityBackend[Any]


async def add(backend: Backend, *messages: Message) -> list[Message]:
    async with backend.transaction() as tx:
        added = [tx.add_message(m) for m in messages]
    return added


def msg(body: bytes = b"hello", topic: str = "orders", **kw: Any) -> Message:
    return Message(topic=topic, body=body, **kw)


def view(
    message_id: str,
    *,
    offset: int = 0,
    queue_id: int = 0,
    topic: str = "orders",
    broker: str = "b1",
) -> MessageView:
    return MessageView(
        message_id=message_id,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        body=b"x",
        broker_name=broker,
    )


def result(message_id: str, *, offset: int, queue_id: int = 0, broker: str = "b1") -> SendResult:
    return SendResult(
        message_id=message_id,
        topic="orders",
        queue_id=queue_id,
        queue_offset=offset,
        broker_name=broker,
    )


async def stub(backend: Backend, message_id: str | None) -> MessageStub:
    assert message_id is not None
    found = await backend.get_stub(message_id)
    assert found is not None
    return found


# -- outbox transactions ---------------------------------------------------------------------


async def test_add_message_stores_stub_on_commit(backend: Backend, clock: FakeClock) -> None:
    seen: list[Sequence[Message]] = []
    backend.add_commit_listener(seen.append)
    body = bytes(range(256)) * 4
    async with backend.transaction() as tx:
        m = tx.add_message(msg(body, tag="created", keys=("k1", "k2")))
        assert m.message_id
        assert len(m.message_id) == 32
        assert await backend.get_stub(m.message_id) is None  # nothing before the commit
    s = await stub(backend, m.message_id)
    assert s.topic == "orders"
    assert s.tag == "created"
    assert s.keys == ("k1", "k2")
    assert s.content == body
    assert s.status is StubStatus.UNCONFIRMED
    assert s.send_count == 0
    assert s.next_resend_at == s.created_at == s.updated_at == clock.now()
    assert s.broker_name is None
    assert s.queue_id is None
    assert s.queue_offset is None
    assert s.to_message() == Message(
        topic="orders", body=body, tag="created", keys=("k1", "k2"), message_id=m.message_id
    )
    assert [list(x) for x in seen] == [[m]]


async def test_caller_chosen_id_is_kept(backend: Backend) -> None:
    (m,) = await add(backend, msg(message_id="ORDER-42"))
    assert m.message_id == "ORDER-42"
    assert (await stub(backend, "ORDER-42")).message_id == "ORDER-42"


async def test_rollback_leaves_nothing(backend: Backend) -> None:
    seen: list[object] = []
    backend.add_commit_listener(seen.append)
    committed: list[str] = []
    added: Message | None = None

    async def fail() -> None:
        nonlocal added
        async with backend.transaction() as tx:
            added = tx.add_message(msg())
            tx.on_commit(lambda: committed.append("yes"))
            raise RuntimeError("business failed")

    with pytest.raises(RuntimeError):
        await fail()
    assert added is not None
    assert added.message_id
    assert await backend.get_stub(added.message_id) is None
    assert committed == []
    assert seen == []


async def test_duplicate_message_id_rolls_back_the_whole_transaction(backend: Backend) -> None:
    await add(backend, msg(message_id="DUP"))

    async def clash() -> None:
        async with backend.transaction() as tx:
            tx.add_message(msg(message_id="OTHER"))
            tx.add_message(msg(message_id="DUP"))

    with pytest.raises(DuplicateMessageIdError):
        await clash()
    assert await backend.get_stub("OTHER") is None


@pytest.mark.parametrize(
    "bad",
    [
        Message(topic="t", body=b"x", properties={"a": "b"}),
        Message(topic="t", body=b"x", message_group="g"),
        Message(topic="t", body=b"x", delivery_time=1.0),
        Message(topic="", body=b"x"),
        Message(topic="t", body=b"x", keys=("has space",)),
        Message(topic="t", body=b"x", message_id="x" * 65),
    ],
)
async def test_unstorable_messages_are_refused(backend: Backend, bad: Message) -> None:
    async with backend.transaction() as tx:
        with pytest.raises(InvalidArgumentError):
            tx.add_message(bad)


async def test_on_commit_runs_after_commit(backend: Backend) -> None:
    order: list[str] = []
    async with backend.transaction() as tx:
        tx.on_commit(lambda: order.append("committed"))
        order.append("body")
    assert order == ["body", "committed"]


# -- relay and resend selection --------------------------------------------------------------


async def test_relay_selection(backend: Backend, clock: FakeClock) -> None:
    a, b = await add(backend, msg(b"a"), msg(b"b"))
    found = {s.message_id for s in await backend.stubs_for_relay(clock.now(), limit=10)}
    assert found == {a.message_id, b.message_id}
    assert await backend.stubs_for_relay(clock.now() - timedelta(seconds=1), limit=10) == []
    assert a.message_id is not None
    await backend.record_sent(
        a.message_id, result(a.message_id, offset=3), next_resend_at=clock.now(), now=clock.now()
    )
    found = {s.message_id for s in await backend.stubs_for_relay(clock.now(), limit=10)}
    assert found == {b.message_id}
    assert len(await backend.stubs_for_relay(clock.now(), limit=0)) == 0


async def test_claim_is_compare_and_set(backend: Backend, clock: FakeClock) -> None:
    (m,) = await add(backend, msg())
    before = await stub(backend, m.message_id)
    until = clock.now() + timedelta(seconds=30, microseconds=123)
    assert await backend.claim_stub(before, until=until, now=clock.now())
    assert not await backend.claim_stub(before, until=until, now=clock.now())
    after = await stub(backend, m.message_id)
    assert after.next_resend_at == until  # microseconds survive the round trip
    assert await backend.claim_stub(after, until=until + timedelta(seconds=1), now=clock.now())


async def test_claim_refuses_settled_stubs(backend: Backend, clock: FakeClock) -> None:
    (m,) = await add(backend, msg())
    assert m.message_id is not None
    s = await stub(backend, m.message_id)
    await backend.void_stub(m.message_id, clock.now())
    assert not await backend.claim_stub(s, until=clock.now(), now=clock.now())


async def test_record_sent_and_failures(backend: Backend, clock: FakeClock) -> None:
    (m,) = await add(backend, msg())
    mid = m.message_id
    assert mid is not None
    later = clock.now() + timedelta(seconds=30)
    await backend.record_send_failed(
        mid, outcome_unknown=True, error="timeout", next_resend_at=later, now=clock.now()
    )
    s = await stub(backend, mid)
    assert (s.status, s.send_count, s.last_error, s.next_resend_at) == (
        StubStatus.UNKNOWN,
        1,
        "timeout",
        later,
    )
    await backend.record_send_failed(
        mid, outcome_unknown=False, error="refused", next_resend_at=later, now=clock.now()
    )
    s = await stub(backend, mid)
    assert (s.status, s.send_count, s.last_error) == (StubStatus.UNKNOWN, 2, "refused")
    await backend.record_sent(
        mid, result(mid, offset=7, queue_id=2), next_resend_at=later, now=later
    )
    s = await stub(backend, mid)
    assert s.status is StubStatus.UNCONFIRMED
    assert s.send_count == 3
    assert s.last_error is None
    assert (s.broker_name, s.queue_id, s.queue_offset, s.updated_at) == ("b1", 2, 7, later)


async def test_record_sent_keeps_confirmed(backend: Backend, clock: FakeClock) -> None:
    (m,) = await add(backend, msg())
    mid = m.message_id
    assert mid is not None
    async with backend.transaction() as tx:
        assert await tx.confirm_stub(mid, clock.now()) is StubConfirmation.CONFIRMED
    await backend.record_sent(
        mid, result(mid, offset=1), next_resend_at=clock.now(), now=clock.now()
    )
    await backend.record_send_failed(
        mid, outcome_unknown=True, error="x", next_resend_at=clock.now(), now=clock.now()
    )
    s = await stub(backend, mid)
    assert s.status is StubStatus.CONFIRMED
    assert s.send_count == 2


async def _sent(
    backend: Backend, clock: FakeClock, offset: int | None, *, queue_id: int = 0, count: int = 1
) -> str:
    (m,) = await add(backend, msg())
    mid = m.message_id
    assert mid is not None
    for _ in range(count):
        if offset is None:
            await backend.record_send_failed(
                mid, outcome_unknown=True, error="?", next_resend_at=clock.now(), now=clock.now()
            )
        else:
            await backend.record_sent(
                mid,
                result(mid, offset=offset, queue_id=queue_id),
                next_resend_at=clock.now(),
                now=clock.now(),
            )
    return mid


async def test_resend_selection_follows_the_seed_rule(backend: Backend, clock: FakeClock) -> None:
    now = clock.now()
    never_sent = (await add(backend, msg()))[0].message_id
    unknown = await _sent(backend, clock, None)
    behind = await _sent(backend, clock, 5)  # consumer logged offset 9 on queue 0: lost
    ahead = await _sent(backend, clock, 20)  # consumer has not reached 20 yet: wait
    other_queue = await _sent(backend, clock, 1, queue_id=3)  # nothing logged on queue 3
    exhausted = await _sent(backend, clock, 2, count=5)
    received = await _sent(backend, clock, 3)
    other_group = await _sent(backend, clock, 4)
    voided = await _sent(backend, clock, 6)
    await backend.void_stub(voided, now)
    confirmed = await _sent(backend, clock, 7)
    async with backend.transaction() as tx:
        await tx.confirm_stub(confirmed, now)
    await backend.log_receipt("g", view("logged-later", offset=9), now)
    await backend.log_receipt("g", view(received, offset=3), now)
    await backend.log_receipt("other", view(other_group, offset=4), now)
    await backend.log_receipt("other", view("x-other", offset=50), now)

    async def selected(group: str | None, offset_wait: float | None, at: datetime) -> set[str]:
        stubs = await backend.stubs_for_resend(
            at, max_sends=5, group=group, offset_wait=offset_wait, limit=100
        )
        return {s.message_id for s in stubs}

    strict = await selected("g", None, now)
    assert strict == {never_sent, unknown, behind, other_group}
    # the fallback: stored stubs become eligible once they are offset_wait past due
    assert await selected("g", 60.0, now) == strict
    late = now + timedelta(seconds=60)
    assert await selected("g", 60.0, late) == strict | {ahead, other_queue}
    # any group's log counts when no group is configured
    assert await selected(None, None, now) == {never_sent, unknown, behind, ahead}
    # not due yet
    assert await selected("g", None, now - timedelta(seconds=1)) == set()
    assert exhausted not in strict
    assert voided not in strict
    assert confirmed not in strict
    limited = await backend.stubs_for_resend(now, max_sends=5, group="g", offset_wait=None, limit=2)
    assert len(limited) == 2


async def test_exhausted_and_manual_marking(backend: Backend, clock: FakeClock) -> None:
    now = clock.now()
    done = await _sent(backend, clock, 1, count=3)
    fresh = await _sent(backend, clock, 2, count=1)
    found = await backend.stubs_exhausted(now, max_sends=3, limit=10)
    assert [s.message_id for s in found] == [done]
    assert await backend.stubs_exhausted(now - timedelta(seconds=1), max_sends=3, limit=10) == []
    assert await backend.mark_manual(done, "gave up after 3 sends", now)
    assert not await backend.mark_manual(done, "again", now)
    s = await stub(backend, done)
    assert s.alerted
    assert s.last_error == "manual: gave up after 3 sends"
    assert await backend.stubs_exhausted(now, max_sends=3, limit=10) == []
    assert [x.message_id for x in await backend.list_stubs(alerted=True)] == [done]
    assert fresh in {x.message_id for x in await backend.list_stubs(alerted=False)}
    await backend.clear_manual(done, "previous", now)
    assert (await stub(backend, done)).last_error == "previous"
    assert [s.message_id for s in await backend.stubs_exhausted(now, max_sends=3, limit=10)] == [
        done
    ]


async def test_operator_void_and_reschedule(backend: Backend, clock: FakeClock) -> None:
    mid = await _sent(backend, clock, 4, count=5)
    await backend.mark_manual(mid, "x", clock.now())
    clock.advance(10)
    voided = await backend.void_stub(mid, clock.now())
    assert voided.status is StubStatus.VOID
    assert voided.updated_at == clock.now()
    again = await backend.reschedule_stub(mid, clock.now())
    assert again.status is StubStatus.UNCONFIRMED
    assert again.send_count == 0
    assert again.queue_offset is None
    assert again.last_error is None
    assert again.next_resend_at == clock.now()
    assert [s.message_id for s in await backend.stubs_for_relay(clock.now(), limit=5)] == [mid]
    with pytest.raises(StubNotFoundError):
        await backend.void_stub("missing", clock.now())
    with pytest.raises(StubNotFoundError):
        await backend.reschedule_stub("missing", clock.now())
    async with backend.transaction() as tx:
        await tx.confirm_stub(mid, clock.now())
    with pytest.raises(StubStateError):
        await backend.void_stub(mid, clock.now())
    with pytest.raises(StubStateError):
        await backend.reschedule_stub(mid, clock.now())


async def test_list_stubs_filters_and_orders(backend: Backend, clock: FakeClock) -> None:
    ids = []
    for i in range(3):
        (m,) = await add(backend, msg(bytes([i])))
        ids.append(m.message_id)
        clock.advance(1)
    await backend.void_stub(ids[1], clock.now())
    assert [s.message_id for s in await backend.list_stubs()] == ids
    assert [s.message_id for s in await backend.list_stubs(status=StubStatus.VOID)] == [ids[1]]
    assert [s.message_id for s in await backend.list_stubs(limit=2)] == ids[:2]


# -- message log -----------------------------------------------------------------------------


async def test_log_receipt_inserts_then_counts(backend: Backend, clock: FakeClock) -> None:
    first = await backend.log_receipt("g", view("M1", offset=4, queue_id=1), clock.now())
    assert (first.status, first.receive_count, first.queue_offset) == (LogStatus.RECEIVED, 1, 4)
    assert first.created_at == clock.now()
    assert first.consumed_at is None
    clock.advance(5)
    again = await backend.log_receipt("g", view("M1", offset=99, queue_id=2), clock.now())
    assert again.receive_count == 2
    assert (again.queue_id, again.queue_offset, again.created_at) == (1, 4, first.created_at)
    other = await backend.log_receipt("h", view("M1", offset=4), clock.now())
    assert other.receive_count == 1
    assert await backend.get_log("g", "M1") == again
    assert await backend.get_log("g", "nope") is None
    assert [e.consumer_group for e in await backend.list_log()] == ["g", "h"]
    assert [e.consumer_group for e in await backend.list_log(group="h")] == ["h"]


async def test_claim_log_commits_with_the_transaction(backend: Backend, clock: FakeClock) -> None:
    await backend.log_receipt("g", view("M1"), clock.now())

    async def fail() -> None:
        async with backend.transaction() as tx:
            assert await tx.claim_log("g", "M1", clock.now())
            raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError):
        await fail()
    entry = await backend.get_log("g", "M1")
    assert entry is not None
    assert entry.status is LogStatus.RECEIVED
    async with backend.transaction() as tx:
        assert await tx.claim_log("g", "M1", clock.now())
    entry = await backend.get_log("g", "M1")
    assert entry is not None
    assert entry.status is LogStatus.CONSUMED
    assert entry.consumed_at == clock.now()
    async with backend.transaction() as tx:
        assert not await tx.claim_log("g", "M1", clock.now())
        assert not await tx.claim_log("g", "never-received", clock.now())
    # a later duplicate receipt still counts, and keeps CONSUMED
    dup = await backend.log_receipt("g", view("M1"), clock.now())
    assert dup.status is LogStatus.CONSUMED
    assert dup.receive_count == 2


@pytest.mark.parametrize("first_commits", [True, False])
async def test_concurrent_claims_serialise(
    backend: Backend, clock: FakeClock, first_commits: bool
) -> None:
    await backend.log_receipt("g", view("M1"), clock.now())

    async def second() -> bool:
        async with backend.transaction() as tx:
            return await tx.claim_log("g", "M1", clock.now())

    racer: asyncio.Task[bool] | None = None

    async def first() -> None:
        nonlocal racer
        async with backend.transaction() as tx:
            assert await tx.claim_log("g", "M1", clock.now())
            racer = asyncio.create_task(second())
            await asyncio.sleep(0.3)
            assert not racer.done(), "the second claimer must wait for the first to finish"
            if not first_commits:
                raise RuntimeError("first rolls back")

    if first_commits:
        await first()
    else:
        with pytest.raises(RuntimeError):
            await first()
    assert racer is not None
    assert await asyncio.wait_for(racer, 30) is (not first_commits)


async def test_confirm_stub_outcomes(backend: Backend, clock: FakeClock) -> None:
    (m,) = await add(backend, msg())
    mid = m.message_id
    assert mid is not None
    await backend.void_stub(mid, clock.now())
    async with backend.transaction() as tx:
        assert await tx.stub_status(mid) is StubStatus.VOID
        assert await tx.stub_status("missing") is None
        assert await tx.confirm_stub("missing", clock.now()) is StubConfirmation.NO_STUB
        assert await tx.confirm_stub(mid, clock.now()) is StubConfirmation.CONFIRMED
    assert (await stub(backend, mid)).status is StubStatus.CONFIRMED
    async with backend.transaction() as tx:
        assert await tx.confirm_stub(mid, clock.now()) is StubConfirmation.ALREADY_CONFIRMED


async def test_prune_keeps_the_highest_offset_per_queue(backend: Backend, clock: FakeClock) -> None:
    t0 = clock.now()
    for i in range(5):
        await backend.log_receipt("g", view(f"M{i}", offset=i), t0)
    await backend.log_receipt("g", view("Q1", offset=2, queue_id=1), t0)
    await backend.log_receipt("h", view("H0", offset=0), t0)
    for mid in ["M0", "M1", "M3", "M4", "Q1"]:
        async with backend.transaction() as tx:
            assert await tx.claim_log("g", mid, t0)
    async with backend.transaction() as tx:
        assert await tx.claim_log("h", "H0", t0)
    clock.advance(3600)
    assert await backend.prune_log(older_than=t0, group=None) == 0  # nothing older than t0
    removed = await backend.prune_log(older_than=clock.now(), group="g")
    assert removed == 3  # M0, M1, M3; M2 is RECEIVED, M4 and Q1 are their queues' highest
    left = {(e.consumer_group, e.message_id) for e in await backend.list_log()}
    assert left == {("g", "M2"), ("g", "M4"), ("g", "Q1"), ("h", "H0")}
    assert await backend.prune_log(older_than=clock.now()) == 0


async def test_prune_keeps_the_rows_of_pending_stubs(backend: Backend, clock: FakeClock) -> None:
    """A log-only consumer never confirms stubs: the log row alone stops a resend."""
    (m,) = await add(backend, msg())
    mid = m.message_id
    assert mid is not None
    t0 = clock.now()
    await backend.log_receipt("g", view(mid, offset=0), t0)
    await backend.log_receipt("g", view("LATER", offset=1), t0)
    for consumed in (mid, "LATER"):
        async with backend.transaction() as tx:
            assert await tx.claim_log("g", consumed, t0)
    clock.advance(3600)
    assert (await stub(backend, mid)).status in PENDING_STATUSES
    assert await backend.prune_log(older_than=clock.now()) == 0
    async with backend.transaction() as tx:
        assert await tx.confirm_stub(mid, clock.now()) is StubConfirmation.CONFIRMED
    assert await backend.prune_log(older_than=clock.now()) == 1
    assert {e.message_id for e in await backend.list_log()} == {"LATER"}


async def test_message_ids_and_groups_are_case_sensitive(
    backend: Backend, clock: FakeClock
) -> None:
    t0 = clock.now()
    await add(backend, msg(message_id="order-1"), msg(message_id="ORDER-1"))
    assert (await stub(backend, "order-1")).message_id == "order-1"
    assert (await stub(backend, "ORDER-1")).message_id == "ORDER-1"
    await backend.log_receipt("billing", view("order-1", offset=0), t0)
    await backend.log_receipt("billing", view("ORDER-1", offset=1), t0)
    await backend.log_receipt("Billing", view("order-1", offset=0), t0)
    async with backend.transaction() as tx:
        assert await tx.claim_log("billing", "ORDER-1", t0)
    entries = {(e.consumer_group, e.message_id): e for e in await backend.list_log()}
    assert set(entries) == {("billing", "order-1"), ("billing", "ORDER-1"), ("Billing", "order-1")}
    assert entries[("billing", "order-1")].status is LogStatus.RECEIVED
    assert entries[("billing", "ORDER-1")].status is LogStatus.CONSUMED


async def test_large_binary_body_round_trips(backend: Backend) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB: above MySQL's plain BLOB limit
    (m,) = await add(backend, msg(body))
    assert (await stub(backend, m.message_id)).content == body


async def test_log_receipts_for_a_batch(backend: Backend, clock: FakeClock) -> None:
    await backend.log_receipt("g", view("OLD", offset=1), clock.now())
    batch = [view("B", offset=3), view("OLD", offset=1), view("A", offset=2), view("B", offset=3)]
    entries = await backend.log_receipts("g", batch, clock.now())
    assert [e.message_id for e in entries] == ["B", "OLD", "A", "B"]
    assert [e.receive_count for e in entries] == [2, 2, 1, 2]
    assert entries[2].queue_offset == 2
    assert await backend.log_receipts("g", [], clock.now()) == []
    stored = await backend.get_log("g", "B")
    assert stored is not None
    assert stored.receive_count == 2
