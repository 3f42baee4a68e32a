"""One delayed message the store refuses for good never stalls the others (docs/semantics.md,
"Consumer retry, delays and dead letters").

A retry of a group whose name is too long for ``%RETRY%<group>`` (created before names were
checked) used to raise in the scheduler: every later message of its level, every other level and
the timer stopped, the messages released before it were stored again every second, and a restart
did not help. Now such a message is dead-lettered when its group's DLQ can hold it, or parked
(one log line, a counter, an entry in schedule.json), and the schedule moves past it — in the
same schedule.json snapshot, so a restart neither re-stalls nor parks it twice.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pocketmq import properties as props
from pocketmq.broker import DEFAULT_DELAY_LEVELS, Broker, BrokerConfig
from pocketmq.broker.schedule import SCHEDULE_TOPIC, ScheduleService
from pocketmq.broker.topics import dlq_topic, retry_topic
from pocketmq.store import MessageStore, PutResult, PutStatus, StoreConfig, StoreMessage

TOO_LONG = "g" * 125  # neither %RETRY%<group> (132) nor %DLQ%<group> (130) fits 127


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    @property
    def ms(self) -> int:
        return int(self.now * 1000)


def _message(body: str, topic: str = "orders") -> StoreMessage:
    return StoreMessage(
        topic=topic, queue_id=0, body=body.encode(), properties={props.MESSAGE_ID: body}
    )


def _bodies(store: MessageStore, topic: str = "orders") -> list[bytes]:
    found = []
    for entry in store.read_queue(topic, 0, 0, 100):
        record = store.read_message(entry.physical_offset)
        assert record is not None
        found.append(record.body)
    return found


def _hold_all(broker: Broker, clock: Clock) -> None:
    schedule = broker.schedule
    held = [
        schedule.schedule_level(_message("level1-a"), 1, clock.ms),
        schedule.schedule_level(_message("poison-1", retry_topic(TOO_LONG)), 1, clock.ms),
        schedule.schedule_level(_message("level1-b"), 1, clock.ms),
        schedule.schedule_level(_message("level2"), 2, clock.ms),
        schedule.schedule_at(_message("poison-2", retry_topic(TOO_LONG)), clock.ms + 500),
        schedule.schedule_at(_message("timer"), clock.ms + 700),
    ]
    assert all(r.status.stored for r in broker.store.append(held))


async def test_an_unstorable_due_message_is_parked_and_the_rest_are_delivered_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    config = BrokerConfig(data_dir=str(tmp_path))
    broker = Broker(config, clock=clock)
    _hold_all(broker, clock)
    clock.now += DEFAULT_DELAY_LEVELS[1] + 1  # level 1, level 2 and both timers are due

    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        for _ in range(3):  # the scheduler runs again (every second while anything is due)
            assert await broker.schedule._deliver_due() is None  # nothing left to wait for
    assert _bodies(broker.store) == [b"level1-a", b"level1-b", b"level2", b"timer"]
    assert broker.counters["schedule_parked"] == 2
    parked_lines = [r for r in caplog.records if "parked" in r.getMessage()]
    assert len(parked_lines) == 2, [r.getMessage() for r in caplog.records]
    assert not any(r.exc_info for r in caplog.records)  # one line each, no traceback
    assert {p.message_id for p in broker.schedule.parked()} == {"poison-1", "poison-2"}
    await broker.close()

    # The progress that passed the parked messages and the parked list are one snapshot: a
    # restart finds nothing due, releases nothing again and logs nothing.
    caplog.clear()
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        broker = Broker(config, clock=clock)
        try:
            assert await broker.schedule._deliver_due() is None
            assert _bodies(broker.store) == [b"level1-a", b"level1-b", b"level2", b"timer"]
            assert {p.message_id for p in broker.schedule.parked()} == {"poison-1", "poison-2"}
        finally:
            await broker.close()
    assert caplog.records == []


class RefuseTopic:
    """The store's append, except that messages for ``topic`` are refused with ``status``."""

    def __init__(self, store: MessageStore, topic: str, status: PutStatus) -> None:
        self.store = store
        self.topic = topic
        self.status = status

    async def __call__(self, messages: list[StoreMessage]) -> list[PutResult]:
        results = self.store.append([m for m in messages if m.topic != self.topic])
        out = []
        for message in messages:
            if message.topic == self.topic:
                out.append(PutResult(status=self.status, reason="injected"))
            else:
                out.append(results.pop(0))
        return out


async def test_a_message_refused_for_now_holds_back_only_itself(tmp_path: Path) -> None:
    """A refusal that may pass (an I/O error) keeps that message scheduled and the scheduler
    asks again in a second; the rest of its level, the other levels and the timer go on, and
    nothing is released twice."""
    clock = Clock()
    store = MessageStore.open(str(tmp_path / "store"), StoreConfig(min_free_disk_bytes=0))
    append = RefuseTopic(store, "flaky", PutStatus.UNKNOWN_ERROR)
    schedule = ScheduleService(store, str(tmp_path / "config"), DEFAULT_DELAY_LEVELS, append, clock)
    held = [
        schedule.schedule_level(_message("a"), 1, clock.ms),
        schedule.schedule_level(_message("f", "flaky"), 1, clock.ms),
        schedule.schedule_level(_message("b"), 1, clock.ms),
        schedule.schedule_level(_message("c"), 2, clock.ms),
        schedule.schedule_at(_message("d"), clock.ms + 100),
    ]
    assert all(r.status.stored for r in store.append(held))
    clock.now += DEFAULT_DELAY_LEVELS[1] + 1

    retry_at = await schedule._deliver_due()
    assert retry_at is not None
    assert 0 < retry_at - clock.ms <= 1000
    assert _bodies(store) == [b"a", b"b", b"c", b"d"]
    assert _bodies(store, "flaky") == []
    assert schedule.parked() == []  # refused for now is not refused for good

    clock.now += 1
    assert await schedule._deliver_due() == clock.ms + 1000  # still refused: asked again
    append.topic = ""  # the store accepts again
    clock.now += 1
    assert await schedule._deliver_due() is None
    assert _bodies(store) == [b"a", b"b", b"c", b"d"]  # nothing twice
    assert _bodies(store, "flaky") == [b"f"]
    store.close()


async def test_a_retry_whose_dead_letter_topic_fits_is_dead_lettered(tmp_path: Path) -> None:
    """A group of 121 characters: ``%RETRY%<group>`` is 128 characters, ``%DLQ%<group>`` 126.
    Its retry can never be stored, but its dead letter can: that is where it goes."""
    group = "g" * 121
    clock = Clock()
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)), clock=clock)
    try:
        retry = msgspec.structs.replace(
            _message("retry-of-a-long-group", retry_topic(group)),
            properties={props.MESSAGE_ID: "R1", props.RETRY_TOPIC: "orders"},
            reconsume_times=1,
        )
        [stored] = broker.store.append([broker.schedule.schedule_level(retry, 1, clock.ms)])
        assert stored.status.stored
        clock.now += DEFAULT_DELAY_LEVELS[0] + 0.5
        assert await broker.schedule._deliver_due() is None
        [letter] = broker.browse(dlq_topic(group), 0, 0)
        assert letter.body == b"retry-of-a-long-group"
        assert letter.properties[props.MESSAGE_ID] == "R1"
        assert letter.properties[props.RETRY_TOPIC] == "orders"
        assert props.REAL_TOPIC not in letter.properties
        assert broker.counters["schedule_dead_lettered"] == 1
        assert broker.counters["schedule_parked"] == 0
    finally:
        await broker.close()


async def test_an_unexpected_failure_of_one_level_does_not_stop_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A level whose queue cannot be read (an I/O error, a bug) is retried every second with one
    log line a minute; the other levels and the timer are delivered meanwhile."""
    clock = Clock()
    store = MessageStore.open(str(tmp_path / "store"), StoreConfig(min_free_disk_bytes=0))
    schedule = ScheduleService(
        store,
        str(tmp_path / "config"),
        DEFAULT_DELAY_LEVELS,
        RefuseTopic(store, "no such topic", PutStatus.DISK_FULL),  # refuses nothing here
        clock,
    )
    held = [
        schedule.schedule_level(_message("a"), 1, clock.ms),
        schedule.schedule_level(_message("b"), 2, clock.ms),
        schedule.schedule_at(_message("c"), clock.ms + 100),
    ]
    assert all(r.status.stored for r in store.append(held))
    clock.now += DEFAULT_DELAY_LEVELS[1] + 1
    read_queue = store.read_queue

    def broken_level_1(topic: str, queue_id: int, offset: int, count: int) -> list[Any]:
        if (topic, queue_id) == (SCHEDULE_TOPIC, 0):
            raise OSError(5, "Input/output error")
        return read_queue(topic, queue_id, offset, count)

    store.read_queue = broken_level_1  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        for _ in range(5):
            assert await schedule._deliver_due() == clock.ms + 1000
            clock.now += 1
    assert _bodies(store) == [b"b", b"c"]
    assert len(caplog.records) == 1
    assert "delay level 1" in caplog.records[0].getMessage()

    store.read_queue = read_queue  # type: ignore[method-assign]
    assert await schedule._deliver_due() is None
    assert _bodies(store) == [b"b", b"c", b"a"]
    store.close()
