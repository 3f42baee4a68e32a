"""Transactional messages against real broker processes (issue 6; docs/transactions.md).

Commit, rollback, check-back, a producer killed after its half send, broker restarts (SIGTERM and
SIGKILL with sync flush), duplicate and conflicting ends, late check answers, discard after the
maximum number of checks, and the transparent-only retry of half messages (seed 004). Brokers run
with a 0.5 s transaction timeout and check interval so each scenario takes a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq import (
    InvalidArgumentError,
    Message,
    MessageView,
    SendOutcomeUnknownError,
    TopicNotFoundError,
)
from pocketmq.client import (
    Admin,
    ClientConfig,
    ProducerConfig,
    SendResult,
    SimpleConsumer,
    TransactionInfo,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.client.sync import SyncTransactionProducer
from pocketmq.errors import BrokerConnectionError, TransactionStateError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker
from .conftest import FAST_BROKER, create, eventually

pytestmark = pytest.mark.integration

COMMIT = TransactionResolution.COMMIT
ROLLBACK = TransactionResolution.ROLLBACK
UNKNOWN = TransactionResolution.UNKNOWN

CHECK_MAX = 3
TX_BROKER: dict[str, dict[str, Any]] = {
    "broker": {
        **FAST_BROKER["broker"],
        "transaction_timeout": 0.5,
        "transaction_check_interval": 0.5,
        "transaction_check_max": CHECK_MAX,
    },
    "store": dict(FAST_BROKER["store"]),
}
FAST_CLIENT = ClientConfig(heartbeat_interval=2.0, request_timeout=2.0)


@pytest.fixture(scope="module")
def tx_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_broker(tmp_path_factory, "txbroker", config=TX_BROKER, grpc_port=None) as process:
        yield process


class Checker:
    """A checker whose answers the test sets per message id (UNKNOWN until set)."""

    def __init__(self) -> None:
        self.answers: dict[str, TransactionResolution] = {}
        self.seen: list[MessageView] = []

    def __call__(self, message: MessageView) -> TransactionResolution:
        self.seen.append(message)
        return self.answers.get(message.message_id, UNKNOWN)

    def checked(self, message_id: str) -> int:
        return sum(m.message_id == message_id for m in self.seen)


def _producer(address: str, group: str, checker: Any, *topics: str) -> TransactionProducer:
    return TransactionProducer(
        checker,
        topics=topics,
        servers=address,
        config=ProducerConfig(group=group),
        client=FAST_CLIENT,
    )


async def _drain(address: str, topic: str, group: str, quiet: float = 0.6) -> list[str]:
    """Every message id the group can receive from ``topic`` until ``quiet`` s pass without
    one (acked as received)."""
    got: list[str] = []
    async with SimpleConsumer(group, topic, servers=address, await_duration=0.2) as consumer:
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            batch = await consumer.receive(32, invisible_duration=30)
            if batch:
                last = time.monotonic()
                got += [m.message_id for m in batch]
                await consumer.ack_many(batch)
    return got


async def _state(address: str, message_id: str) -> TransactionInfo:
    async with Admin(servers=address) as admin:
        info = await admin.transaction_state(message_id)
    assert info is not None, f"no transaction for {message_id}"
    return info


async def _counters(address: str) -> dict[str, int]:
    async with Admin(servers=address) as admin:
        [status] = await admin.broker_status()
    return status.counters


def _message(topic: str, body: bytes, key: str = "") -> Message:
    return Message(topic=topic, body=body, keys=(key,) if key else ())


async def test_commit_delivers_once_rollback_never_and_nothing_is_checked(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    checker = Checker()
    seen_inside: list[str] = []

    async def commit(result: SendResult) -> TransactionResolution:
        # the half message is stored, and no consumer can see it yet
        seen_inside.extend(await _drain(tx_broker.address, topic, group, quiet=0.3))
        return COMMIT

    async with _producer(tx_broker.address, pgroup, checker, topic) as producer:
        committed = await producer.send_in_transaction(_message(topic, b"paid"), commit)
        rolled_back = await producer.send_in_transaction(
            _message(topic, b"refused"), lambda result: ROLLBACK
        )
        assert committed.confirmed
        assert rolled_back.confirmed
        assert committed.transaction_id
        assert committed.send_result.queue_offset == -1  # not in the real queue before commit
        await asyncio.sleep(1.5)  # three check intervals: nothing may be checked
        stats = producer.statistics()
        assert (stats.committed, stats.rolled_back, stats.checks_received) == (1, 1, 0)
    assert seen_inside == []
    assert checker.seen == []
    assert await _drain(tx_broker.address, topic, group) == [committed.message_id]
    assert (await _state(tx_broker.address, committed.message_id)).state == "COMMITTED"
    info = await _state(tx_broker.address, rolled_back.message_id)
    assert (info.state, info.source, info.checks) == ("ROLLED_BACK", "client", 0)
    async with Admin(servers=tx_broker.address) as admin:
        history = await admin.message_history(committed.message_id)
    assert [a.outcome for a in history if a.group == pgroup] == ["TX_PREPARED", "TX_COMMIT"]


async def test_unknown_is_checked_back_then_committed_or_rolled_back_once(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    checker = Checker()
    async with _producer(tx_broker.address, pgroup, checker, topic) as producer:
        yes = await producer.send_in_transaction(_message(topic, b"yes", "k1"), lambda r: UNKNOWN)
        no = await producer.send_in_transaction(_message(topic, b"no", "k2"), lambda r: UNKNOWN)
        assert not yes.confirmed
        assert not no.confirmed
        await eventually(lambda: checker.checked(yes.message_id) >= 1, timeout=5)
        checker.answers[yes.message_id] = COMMIT
        checker.answers[no.message_id] = ROLLBACK
        await eventually(lambda: producer.statistics().checks_answered >= 2, timeout=5)
        answered = {m: checker.checked(m) for m in (yes.message_id, no.message_id)}
        await asyncio.sleep(1.5)  # three more intervals: checks stop at the outcome
        assert {m: checker.checked(m) for m in answered} == answered
    view = next(m for m in checker.seen if m.message_id == yes.message_id)
    assert (view.topic, view.body, view.keys) == (topic, b"yes", ("k1",))
    assert await _drain(tx_broker.address, topic, group) == [yes.message_id]
    info = await _state(tx_broker.address, yes.message_id)
    assert (info.state, info.source) == ("COMMITTED", "check")
    assert info.checks == answered[yes.message_id]
    assert (await _state(tx_broker.address, no.message_id)).state == "ROLLED_BACK"


async def test_a_failing_local_transaction_is_left_to_the_checker(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    checker = Checker()
    sent: list[SendResult] = []

    def local_transaction(result: SendResult) -> TransactionResolution:
        sent.append(result)
        raise ConnectionError("database went away during COMMIT")

    async with _producer(tx_broker.address, pgroup, checker, topic) as producer:
        with pytest.raises(ConnectionError):
            await producer.send_in_transaction(_message(topic, b"maybe"), local_transaction)
        [result] = sent
        checker.answers[result.message_id] = COMMIT  # the row is there: it did commit
        await eventually(lambda: producer.statistics().checks_answered >= 1, timeout=5)
    assert await _drain(tx_broker.address, topic, group) == [result.message_id]


async def test_duplicate_ends_are_ignored_and_conflicting_ends_rejected(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    async with _producer(tx_broker.address, pgroup, Checker(), topic) as producer:
        first = await producer.send_half_message(_message(topic, b"one"))
        second = await producer.send_half_message(_message(topic, b"two"))
        for _ in range(3):
            assert await producer.end_transaction(first, COMMIT)
        with pytest.raises(TransactionStateError, match="already COMMITTED by the producer"):
            await producer.end_transaction(first, ROLLBACK)
        assert await producer.end_transaction(second, ROLLBACK)
        with pytest.raises(TransactionStateError, match="already ROLLED_BACK"):
            await producer.end_transaction(second, COMMIT)
        # on the wire: a repeated end is answered OK and says it changed nothing
        connection = await producer.pool.get(tx_broker.address)
        request = w.EndTransactionRequest(
            pgroup, first.message_id, first.transaction_id or "", True, topic=topic
        )
        reply = await connection.request(
            RequestCode.END_TRANSACTION, request, w.EndTransactionResponse, 2.0
        )
        assert (reply.state, reply.duplicate) == ("COMMITTED", True)
        # a transaction id that does not match the message is refused, and so is an end that
        # leaves out the topic (docs/transactions.md "3. Ending")
        for wrong in (
            w.EndTransactionRequest(pgroup, first.message_id, "0" * 32, True, topic=topic),
            w.EndTransactionRequest(pgroup, first.message_id, first.transaction_id or "", True),
        ):
            with pytest.raises(TransactionStateError, match=r"does not match|names no"):
                await connection.request(
                    RequestCode.END_TRANSACTION, wrong, w.EndTransactionResponse, 2.0
                )
        # one transaction per message id: a resend of the same id is refused
        with pytest.raises(TransactionStateError, match="already started"):
            await producer.send_half_message(
                Message(topic=topic, body=b"again", message_id=first.message_id)
            )
    assert await _drain(tx_broker.address, topic, group) == [first.message_id]
    counters = await _counters(tx_broker.address)
    assert counters["transaction_duplicate_ends"] >= 3
    assert counters["transaction_conflicting_ends"] >= 2


async def test_a_late_check_answer_after_the_final_state_changes_nothing(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    checking = asyncio.Event()
    answer_now = asyncio.Event()

    async def slow_checker(message: MessageView) -> TransactionResolution:
        checking.set()
        await answer_now.wait()
        return COMMIT  # stale: the producer rolled back in the meantime

    async with _producer(tx_broker.address, pgroup, slow_checker, topic) as producer:
        result = await producer.send_in_transaction(_message(topic, b"late"), lambda r: UNKNOWN)
        await asyncio.wait_for(checking.wait(), 5)
        assert await producer.end_transaction(result, ROLLBACK)
        before = (await _counters(tx_broker.address)).get("transaction_conflicting_ends", 0)
        answer_now.set()
        # the late COMMIT reaches the broker and is refused
        await eventually(lambda: producer.statistics().late_answers == 1, timeout=5)
        stats = producer.statistics()
        assert (stats.checks_answered, stats.rolled_back) == (0, 1)
        after = (await _counters(tx_broker.address))["transaction_conflicting_ends"]
        assert after == before + 1
    info = await _state(tx_broker.address, result.message_id)
    assert (info.state, info.source) == ("ROLLED_BACK", "client")
    assert await _drain(tx_broker.address, topic, group) == []


async def test_check_max_reached_discards_and_records_it(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    checker = Checker()  # always UNKNOWN
    before = (await _counters(tx_broker.address)).get("transactions_discarded", 0)
    async with _producer(tx_broker.address, pgroup, checker, topic) as producer:
        result = await producer.send_in_transaction(_message(topic, b"lost"), lambda r: UNKNOWN)

        async def discarded() -> bool:
            return (await _state(tx_broker.address, result.message_id)).state == "DISCARDED"

        await eventually(discarded, timeout=10)
        with pytest.raises(TransactionStateError, match="DISCARDED by the broker"):
            await producer.end_transaction(result, COMMIT)
        assert await producer.end_transaction(result, ROLLBACK)  # same effect: a duplicate
        await asyncio.sleep(1.0)
    assert checker.checked(result.message_id) == CHECK_MAX
    info = await _state(tx_broker.address, result.message_id)
    assert (info.checks, info.source) == (CHECK_MAX, "broker")
    assert info.detail == f"no outcome after {CHECK_MAX} checks"
    assert (await _counters(tx_broker.address))["transactions_discarded"] == before + 1
    assert await _drain(tx_broker.address, topic, group) == []


_CRASHING_PRODUCER = """
import asyncio, sys
from pocketmq import Message
from pocketmq.client import ProducerConfig, TransactionProducer, TransactionResolution

async def main(address, topic, group):
    async def never_ends(result):
        print("HALF", result.message_id, flush=True)
        await asyncio.sleep(3600)
        return TransactionResolution.COMMIT

    producer = TransactionProducer(
        lambda m: TransactionResolution.UNKNOWN,
        topics=[topic],
        servers=address,
        config=ProducerConfig(group=group),
    )
    async with producer:
        await producer.send_in_transaction(Message(topic=topic, body=b"orphan"), never_ends)

asyncio.run(main(*sys.argv[1:4]))
"""


async def test_producer_killed_after_the_half_send_a_sibling_answers_the_check(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    await create(tx_broker.address, topic=topic, group=group)
    sibling = Checker()
    async with _producer(tx_broker.address, pgroup, sibling, topic) as producer:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CRASHING_PRODUCER,
            tx_broker.address,
            topic,
            pgroup,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert child.stdout is not None
            line = (await asyncio.wait_for(child.stdout.readline(), 20)).decode()
            assert line.startswith("HALF "), line
            message_id = line.split()[1]
            child.send_signal(signal.SIGKILL)  # mid local transaction: no end ever comes
        finally:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            if child.stdout is not None:
                await child.stdout.read()  # to EOF, so the transport closes with the test
            await child.wait()
        assert (await _state(tx_broker.address, message_id)).state == "PREPARED"
        sibling.answers[message_id] = COMMIT  # the sibling finds the crashed one's row
        await eventually(lambda: producer.statistics().checks_answered >= 1, timeout=10)
    view = next(m for m in sibling.seen if m.message_id == message_id)
    assert (view.topic, view.body) == (topic, b"orphan")
    assert await _drain(tx_broker.address, topic, group) == [message_id]
    info = await _state(tx_broker.address, message_id)
    assert (info.state, info.source) == ("COMMITTED", "check")


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_broker_restarted_mid_transaction(
    tmp_path: Path, names: Callable[[str], str], how: str
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    broker = BrokerProcess(tmp_path, config=TX_BROKER, flush="sync", grpc_port=None)
    try:
        await create(broker.address, topic=topic, group=group)
        checker = Checker()
        async with _producer(broker.address, pgroup, checker, topic) as producer:
            ended_later = await producer.send_half_message(_message(topic, b"ended later"))
            checked_later = await producer.send_half_message(_message(topic, b"checked later"))
            done = await producer.send_in_transaction(_message(topic, b"done"), lambda r: COMMIT)
            gone = await producer.send_in_transaction(_message(topic, b"gone"), lambda r: ROLLBACK)
            await eventually(lambda: checker.checked(checked_later.message_id) >= 1, timeout=5)
            if how == "sigkill":
                broker.kill()
            else:
                assert broker.stop() == 0
            broker.restart()
            # after the restart: the pending ones are still pending, the ended ones ended
            assert (await _state(broker.address, ended_later.message_id)).state == "PREPARED"
            info = await _state(broker.address, checked_later.message_id)
            assert info.state == "PREPARED"
            assert info.checks >= 1  # the check count survived
            assert (await _state(broker.address, done.message_id)).state == "COMMITTED"
            assert (await _state(broker.address, gone.message_id)).state == "ROLLED_BACK"
            assert await producer.end_transaction(done, COMMIT)  # duplicate: still fine
            with pytest.raises(TransactionStateError):
                await producer.end_transaction(gone, COMMIT)
            assert await producer.end_transaction(ended_later, COMMIT)
            checker.answers[checked_later.message_id] = COMMIT
            await eventually(lambda: producer.statistics().checks_answered >= 1, timeout=10)
        got = await _drain(broker.address, topic, group)
        assert sorted(got) == sorted(
            [ended_later.message_id, checked_later.message_id, done.message_id]
        )
    finally:
        code = broker.stop()
    assert code == 0, broker.log()


async def test_half_messages_are_retried_only_when_certainly_not_stored(
    tmp_path: Path, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    # no lag-based flow control: after SIGCONT the held send must be stored, not refused
    config = {**TX_BROKER, "broker": {**TX_BROKER["broker"], "max_queue_wait": 60.0}}
    broker = BrokerProcess(tmp_path, config=config, grpc_port=None)
    try:
        await create(broker.address, topic=topic, group=group)
        checker = Checker()
        producer_config = ProducerConfig(group=pgroup, send_timeout=1.5, retries=2)
        async with TransactionProducer(
            checker,
            topics=[topic],
            servers=broker.address,
            config=producer_config,
            client=FAST_CLIENT,
        ) as producer:
            # refused before the request left: retried (transparently), then raised as such
            connection = await producer.pool.get(broker.address)
            broker.kill()
            await eventually(lambda: not connection.is_open)  # the client saw it go
            with pytest.raises(BrokerConnectionError):
                await producer.send_half_message(_message(topic, b"refused"))
            assert producer.statistics().retries == 2
            broker.restart()
            warm_up = await producer.send_half_message(_message(topic, b"reconnect"))
            assert await producer.end_transaction(warm_up, ROLLBACK)
            # the request left, no answer: not retried, the outcome is unknown
            assert broker.process is not None
            os.kill(broker.process.pid, signal.SIGSTOP)
            try:
                with pytest.raises(SendOutcomeUnknownError) as caught:
                    await producer.send_half_message(_message(topic, b"in doubt"))
                assert producer.statistics().retries == 2  # no further attempt
            finally:
                os.kill(broker.process.pid, signal.SIGCONT)
            message_id = caught.value.message_id
            # it was stored after all: the broker checks it back; no local record ⇒ ROLLBACK
            checker.answers[message_id] = ROLLBACK
            await eventually(lambda: producer.statistics().checks_answered >= 1, timeout=10)
        assert (await _state(broker.address, message_id)).state == "ROLLED_BACK"
        assert await _drain(broker.address, topic, group) == []
    finally:
        code = broker.stop()
    assert code == 0, broker.log()


def test_sync_facade_runs_the_local_transaction_in_the_calling_thread(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic, group, pgroup = names("t"), names("g"), names("pg")
    asyncio.run(create(tx_broker.address, topic=topic, group=group))
    caller = threading.get_ident()
    threads: dict[str, int] = {}

    def local_transaction(result: SendResult) -> TransactionResolution:
        threads["local"] = threading.get_ident()
        return UNKNOWN

    def checker(message: MessageView) -> TransactionResolution:
        threads["checker"] = threading.get_ident()
        return COMMIT

    with SyncTransactionProducer(
        checker,
        topics=[topic],
        servers=tx_broker.address,
        config=ProducerConfig(group=pgroup),
        client=FAST_CLIENT,
    ) as producer:
        result = producer.send_in_transaction(_message(topic, b"sync"), local_transaction)
        assert result.resolution is UNKNOWN
        deadline = time.monotonic() + 10
        while producer.producer.statistics().checks_answered < 1:
            assert time.monotonic() < deadline, producer.producer.statistics()
            time.sleep(0.05)
        committed = producer.send_in_transaction(_message(topic, b"sync 2"), lambda r: COMMIT)
        assert committed.confirmed
    assert threads["local"] == caller
    assert threads["checker"] != caller
    got = asyncio.run(_drain(tx_broker.address, topic, group))
    assert sorted(got) == sorted([result.message_id, committed.message_id])


async def test_misuse_is_refused_before_anything_is_sent(
    tx_broker: BrokerProcess, names: Callable[[str], str]
) -> None:
    topic = names("t")
    await create(tx_broker.address, topic=topic)
    with pytest.raises(InvalidArgumentError, match="producer group"):
        TransactionProducer(Checker(), servers=tx_broker.address)
    with pytest.raises(TopicNotFoundError):
        async with _producer(tx_broker.address, names("pg"), Checker(), names("missing")):
            pass
    async with _producer(tx_broker.address, names("pg"), Checker(), topic) as producer:
        with pytest.raises(InvalidArgumentError, match="delayed"):
            await producer.send_half_message(
                Message(topic=topic, body=b"x", delivery_time=time.time() + 60)
            )
        with pytest.raises(InvalidArgumentError, match="reserved"):
            await producer.send_half_message(
                Message(topic=topic, body=b"x", properties={"TRAN_MSG": "true"})
            )
        result = await producer.send_half_message(_message(topic, b"y"))
        with pytest.raises(InvalidArgumentError, match="TransactionResolution"):
            await producer.end_transaction(result, "COMMIT")  # type: ignore[arg-type]
        assert await producer.end_transaction(result, ROLLBACK)
