"""The transaction state machine of the broker core, in process with a controllable clock.

The integration suite (tests/integration/test_transactions.py) drives the same paths through real
broker processes and the SDK; here each transition is pinned down directly: prepare, commit,
rollback, duplicates, conflicts, checks, discards, and the rebuild after a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pocketmq import properties as props
from pocketmq.broker import (
    Broker,
    BrokerConfig,
    Delivered,
    GroupConfig,
    InboundMessage,
    TransactionCheck,
    TransactionState,
)
from pocketmq.broker.producers import ProducerRegistry
from pocketmq.broker.transactions import HALF_TOPIC, OP_TOPIC, TX_COMMIT
from pocketmq.errors import (
    MessageIllegalError,
    MessageNotFoundError,
    TransactionStateError,
)
from pocketmq.store import StoreMessage

GROUP = "pg"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _config(path: Path, **overrides: object) -> BrokerConfig:
    values: dict[str, object] = {
        "data_dir": str(path),
        "transaction_timeout": 6.0,
        "transaction_check_interval": 30.0,
        "transaction_check_max": 3,
    }
    values.update(overrides)
    return BrokerConfig(**values)  # type: ignore[arg-type]


async def _open(path: Path, clock: Clock, **overrides: object) -> Broker:
    broker = Broker(_config(path, **overrides), clock=clock)
    await broker.start()
    broker.create_topic("orders", queues=2)
    return broker


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def broker(tmp_path: Path, clock: Clock) -> AsyncIterator[Broker]:
    broker = await _open(tmp_path, clock)
    yield broker
    await broker.close()


def _half(message_id: str, body: bytes = b"pay 10", **extra: str) -> InboundMessage:
    properties = {props.MESSAGE_ID: message_id, props.TRANSACTION_PREPARED: "true", **extra}
    return InboundMessage("orders", body, properties)


async def _prepare(broker: Broker, message_id: str) -> str:
    [outcome] = await broker.send([_half(message_id)], producer_group=GROUP)
    assert outcome.code == 0, outcome.remark
    assert outcome.topic == "orders"
    assert outcome.queue_offset == -1  # not in the real queue yet
    assert outcome.transaction_id
    return outcome.transaction_id


async def _visible(broker: Broker) -> list[str]:
    ids = []
    for queue_id in range(2):
        pulled = await broker.pull("g", "orders", queue_id, 0, max_count=100)
        ids += [m.properties[props.MESSAGE_ID] for m in pulled.messages]
    return ids


async def _consumer_group(broker: Broker) -> None:
    broker.create_group(GroupConfig(name="g"))


async def test_commit_makes_the_message_visible_once(broker: Broker) -> None:
    await _consumer_group(broker)
    tx = await _prepare(broker, "M1")
    assert await _visible(broker) == []
    state = broker.transaction_state("M1")
    assert state is not None
    assert state.state is TransactionState.PREPARED
    assert state.transaction_id == tx
    assert state.producer_group == GROUP

    outcome = await broker.end_transaction(GROUP, "M1", tx, topic="orders", commit=True)
    assert outcome.status.state is TransactionState.COMMITTED
    assert not outcome.duplicate
    again = await broker.end_transaction(GROUP, "M1", tx, topic="orders", commit=True)
    assert again.duplicate
    with pytest.raises(TransactionStateError, match="already COMMITTED"):
        await broker.end_transaction(GROUP, "M1", tx, topic="orders", commit=False)
    assert await _visible(broker) == ["M1"]
    [delivered] = (await broker.pull("g", "orders", 0, 0)).messages or (
        await broker.pull("g", "orders", 1, 0)
    ).messages
    assert props.TRANSACTION_PREPARED not in delivered.properties
    assert props.REAL_TOPIC not in delivered.properties
    assert broker.counters["transactions_committed"] == 1
    assert broker.counters["transaction_duplicate_ends"] == 1
    assert broker.counters["transaction_conflicting_ends"] == 1


async def test_rollback_is_final(broker: Broker) -> None:
    await _consumer_group(broker)
    tx = await _prepare(broker, "M2")
    await broker.end_transaction(GROUP, "M2", tx, topic="orders", commit=False)
    assert (await broker.end_transaction(GROUP, "M2", tx, topic="orders", commit=False)).duplicate
    with pytest.raises(TransactionStateError, match="already ROLLED_BACK by the producer"):
        await broker.end_transaction(GROUP, "M2", tx, topic="orders", commit=True, from_check=True)
    assert await _visible(broker) == []
    state = broker.transaction_state("M2")
    assert state is not None
    assert state.state is TransactionState.ROLLED_BACK


@pytest.mark.parametrize(
    ("group", "topic", "transaction", "field"),
    [
        (GROUP, "", "", "no transaction id"),  # a message id alone
        (GROUP, "orders", "", "no transaction id"),
        ("other-app", "orders", None, "producer group 'other-app'"),
        ("", "orders", None, "no producer group"),
        (GROUP, "", None, "no topic"),
        (GROUP, "payments", None, "topic 'payments'"),
    ],
)
async def test_an_end_must_name_group_topic_and_transaction_of_the_half_message(
    broker: Broker, group: str, topic: str, transaction: str | None, field: str
) -> None:
    """docs/transactions.md "3. Ending": a message id is no key to a transaction (issue 28,
    finding 3); the error names the field that differs, never the value it should have."""
    await _consumer_group(broker)
    tx = await _prepare(broker, "E1")
    named = tx if transaction is None else transaction
    for commit in (True, False):
        with pytest.raises(TransactionStateError, match=field) as refused:
            await broker.end_transaction(group, "E1", named, topic=topic, commit=commit)
        assert tx not in str(refused.value) or named == tx
        assert "'pg'" not in str(refused.value)
        assert "'orders'" not in str(refused.value)
    state = broker.transaction_state("E1")
    assert state is not None
    assert state.state is TransactionState.PREPARED  # nothing changed
    await broker.end_transaction(GROUP, "E1", tx, topic="orders", commit=True, by="alice")
    assert await _visible(broker) == ["E1"]
    with pytest.raises(TransactionStateError, match=field):  # an ended one alike
        await broker.end_transaction(group, "E1", named, topic=topic, commit=True)
    with pytest.raises(TransactionStateError, match=r"COMMITTED by the producer .*user 'alice'"):
        await broker.end_transaction(GROUP, "E1", tx, topic="orders", commit=False)
    [ended] = [a for a in broker.message_history("E1") if a.outcome == "TX_COMMIT"]
    assert ended.error == "ended by user 'alice'"


async def test_wrong_ids_and_bad_half_messages_are_refused(broker: Broker) -> None:
    tx = await _prepare(broker, "M3")
    with pytest.raises(TransactionStateError, match=r"transaction id 'NOT-.*' does not match"):
        await broker.end_transaction(GROUP, "M3", "NOT-" + tx, topic="orders", commit=True)
    with pytest.raises(MessageNotFoundError):
        await broker.end_transaction(GROUP, "NOPE", "x", topic="orders", commit=True)
    # one transaction per message id, pending or ended
    [reused] = await broker.send([_half("M3")], producer_group=GROUP)
    assert reused.code != 0
    assert "already has a transaction" in reused.remark
    await broker.end_transaction(GROUP, "M3", tx, topic="orders", commit=True)
    [reused] = await broker.send([_half("M3")], producer_group=GROUP)
    assert reused.code != 0
    assert "COMMITTED" in reused.remark
    [no_group] = await broker.send([_half("M4")])
    assert "producer group" in no_group.remark
    [delayed] = await broker.send([_half("M5", **{props.DELAY_LEVEL: "2"})], producer_group=GROUP)
    assert "delayed" in delayed.remark
    with pytest.raises(MessageIllegalError):
        broker.transactions.hold(
            StoreMessage(topic="orders", queue_id=0, body=b"x", properties={}), GROUP
        )


async def test_checks_go_to_a_live_producer_and_late_answers_change_nothing(
    broker: Broker, clock: Clock
) -> None:
    checks: list[TransactionCheck] = []
    tx = await _prepare(broker, "M6")
    broker.transactions.check_due(clock.now + 5.9)
    broker.heartbeat_producer("dead", [GROUP], lambda check: False)  # a closed connection
    broker.heartbeat_producer("p1", [GROUP], lambda check: checks.append(check) is None)
    assert checks == []
    clock.now += 6.0
    broker.transactions.check_due(clock.now)
    [check] = checks
    assert check.transaction_id == tx
    assert check.check_number == 1
    assert check.message.topic == "orders"
    assert check.message.properties[props.CHECK_TIMES] == "1"
    assert broker.transactions.producers.client_ids(GROUP) == ["p1"]  # "dead" dropped
    clock.now += 29
    broker.transactions.check_due(clock.now)
    assert len(checks) == 1  # the interval is 30 s
    clock.now += 1
    broker.transactions.check_due(clock.now)
    assert [c.check_number for c in checks] == [1, 2]
    clock.now += 0.1
    await broker.end_transaction(GROUP, "M6", tx, topic="orders", commit=False, from_check=True)
    clock.now += 60
    broker.transactions.check_due(clock.now)
    assert len(checks) == 2  # no checks after the outcome
    with pytest.raises(TransactionStateError, match="late check answer"):
        await broker.end_transaction(GROUP, "M6", tx, topic="orders", commit=True, from_check=True)
    state = broker.transaction_state("M6")
    assert state is not None
    assert state.state is TransactionState.ROLLED_BACK
    assert state.source == "check"
    assert state.checks == 2
    outcomes = [a.outcome for a in broker.message_history("M6")]
    assert outcomes == ["TX_PREPARED", "TX_CHECK", "TX_CHECK", "TX_ROLLBACK"]


async def test_max_checks_discard_and_no_producer_does_not_count(
    broker: Broker, clock: Clock
) -> None:
    checks: list[TransactionCheck] = []
    tx = await _prepare(broker, "M7")
    clock.now += 6
    broker.transactions.check_due(clock.now)  # nobody to ask: not counted
    state = broker.transaction_state("M7")
    assert state is not None
    assert state.checks == 0
    assert "no live producer" in state.detail
    broker.heartbeat_producer("p1", [GROUP], lambda check: checks.append(check) is None)
    broker.transactions.check_due(clock.now)  # the heartbeat made it due again
    for _ in range(3):
        clock.now += 30
        broker.transactions.check_due(clock.now)
    assert [c.check_number for c in checks] == [1, 2, 3]
    state = broker.transaction_state("M7")
    assert state is not None
    assert state.state is TransactionState.DISCARDED
    assert state.detail == "no outcome after 3 checks"
    assert broker.counters["transactions_discarded"] == 1
    with pytest.raises(TransactionStateError, match="DISCARDED by the broker"):
        await broker.end_transaction(GROUP, "M7", tx, topic="orders", commit=True)
    assert (await broker.end_transaction(GROUP, "M7", tx, topic="orders", commit=False)).duplicate
    clock.now += 300
    broker.transactions.check_due(clock.now)
    assert len(checks) == 3


async def test_restart_rebuilds_pending_checks_and_outcomes(tmp_path: Path, clock: Clock) -> None:
    broker = await _open(tmp_path, clock)
    checks: list[TransactionCheck] = []
    broker.heartbeat_producer("p1", [GROUP], lambda check: checks.append(check) is None)
    committed = await _prepare(broker, "A")
    await _prepare(broker, "B")
    await broker.end_transaction(GROUP, "A", committed, topic="orders", commit=True)
    clock.now += 6
    broker.transactions.check_due(clock.now)
    assert [c.message.properties[props.MESSAGE_ID] for c in checks] == ["B"]
    await broker.close()

    broker = await _open(tmp_path, clock)
    try:
        assert broker.transactions.pending_count == 1
        state = broker.transaction_state("B")
        assert state is not None
        assert state.state is TransactionState.PREPARED
        assert state.checks == 1
        a = broker.transaction_state("A")
        assert a is not None
        assert a.state is TransactionState.COMMITTED
        assert (
            await broker.end_transaction(GROUP, "A", committed, topic="orders", commit=True)
        ).duplicate
        with pytest.raises(TransactionStateError):
            await broker.end_transaction(GROUP, "A", committed, topic="orders", commit=False)
        broker.heartbeat_producer("p2", [GROUP], lambda check: checks.append(check) is None)
        clock.now += 29
        broker.transactions.check_due(clock.now)
        assert len(checks) == 1  # the schedule continues where it was
        clock.now += 1
        broker.transactions.check_due(clock.now)
        assert [c.check_number for c in checks] == [1, 2]
    finally:
        await broker.close()


async def test_a_commit_torn_before_its_op_record_is_recovered_not_repeated(
    tmp_path: Path, clock: Clock
) -> None:
    broker = await _open(tmp_path, clock)
    tx = await _prepare(broker, "T")
    [half] = [m for m in broker.store.query_by_id("T") if m.topic == HALF_TOPIC]
    # what a crash between the two records of a commit leaves: the copy without the op record
    broker.store.append(
        [
            StoreMessage(
                topic="orders",
                queue_id=0,
                body=half.body,
                properties={props.MESSAGE_ID: "T"},
                flags=TX_COMMIT,
                prepared_transaction_offset=half.physical_offset,
            )
        ]
    )
    assert broker.store.max_offset(OP_TOPIC, 0) == 0
    await broker.close()

    broker = await _open(tmp_path, clock)
    try:
        await _consumer_group(broker)
        assert broker.transactions.pending_count == 0
        state = broker.transaction_state("T")
        assert state is not None
        assert state.state is TransactionState.COMMITTED
        assert state.source == "recovery"
        assert (await broker.end_transaction(GROUP, "T", tx, topic="orders", commit=True)).duplicate
        assert await _visible(broker) == ["T"]
    finally:
        await broker.close()


async def test_the_half_floor_moves_past_ended_transactions_once_flushed(
    tmp_path: Path, clock: Clock
) -> None:
    broker = await _open(tmp_path, clock)
    first = await _prepare(broker, "F1")
    await _prepare(broker, "F2")
    await broker.end_transaction(GROUP, "F1", first, topic="orders", commit=True)
    written = broker.store.statistics().write_position
    for _ in range(100):  # the periodic flush (every 0.5 s) makes the outcome durable
        if broker.store.statistics().flushed_position >= written:
            break
        await asyncio.sleep(0.05)
    broker.transactions.persist(force=True)
    saved = (tmp_path / "config" / "transactions.json").read_text()
    assert '"half_floor": 1' in saved  # F2 (offset 1) is still pending
    await broker.close()
    broker = await _open(tmp_path, clock)
    try:
        assert broker.transactions.pending_count == 1
        assert broker.transaction_state("F2") is not None
    finally:
        await broker.close()


def test_producer_registry_owner_and_expiry() -> None:
    registry = ProducerRegistry(expiry=30)
    old, new = object(), object()
    registry.heartbeat("c1", ["g"], lambda check: True, 0.0, owner=old)
    registry.heartbeat("c1", ["g"], lambda check: True, 1.0, owner=new)  # reconnected
    registry.unregister("c1", ["g"], owner=old)  # the old connection's close comes late
    assert registry.client_ids("g") == ["c1"]
    registry.heartbeat("c2", ["g", "h"], lambda check: True, 1.0)
    assert registry.expire(31.5) == [("g", "c1"), ("g", "c2"), ("h", "c2")]
    assert registry.groups() == []


def test_producer_registry_keeps_each_users_registration_and_checks_only_allowed_ones() -> None:
    """Issue 28, findings 3 and 5: another user naming the same group and client id neither
    replaces nor removes the producer's registration, and a check of a half message goes only
    to producers whose user may publish to its topic (``may_check``)."""
    registry = ProducerRegistry(expiry=30)
    owner_checks: list[TransactionCheck] = []
    stranger_checks: list[TransactionCheck] = []
    registry.heartbeat(
        "c1", [GROUP], lambda c: owner_checks.append(c) is None, 0.0, user="owner",
        may_check=lambda topic: topic == "orders",
    )  # fmt: skip
    registry.heartbeat(
        "c1", [GROUP], lambda c: stranger_checks.append(c) is None, 0.0, user="stranger",
        may_check=lambda topic: topic == "its-own",
    )  # fmt: skip
    registry.unregister("c1", [GROUP], user="stranger")  # only its own registration goes
    registry.heartbeat(
        "c1", [GROUP], lambda c: stranger_checks.append(c) is None, 0.0, user="stranger",
        may_check=lambda topic: topic == "its-own",
    )  # fmt: skip
    for topic in ("orders", "orders", "orders", "elsewhere"):
        message = Delivered(topic, 0, -1, b"card 4111", {}, 0, 0, 0, 1, "")
        registry.deliver(GROUP, TransactionCheck(GROUP, "tx", 1, message))
    assert [c.message.topic for c in owner_checks] == ["orders"] * 3
    assert stranger_checks == []  # skipped, not dropped
    assert registry.client_ids(GROUP) == ["c1"]
    registry.unregister("c1", [GROUP], user="owner")
    message = Delivered("its-own", 0, -1, b"", {}, 0, 0, 0, 1, "")
    assert registry.deliver(GROUP, TransactionCheck(GROUP, "tx", 1, message)) == "c1"
    assert [c.message.topic for c in stranger_checks] == ["its-own"]
