"""A step of the wall clock delays a delayed message by at most a second once the clock is right
(docs/operations.md, "When the wall clock steps").

Due times are wall-clock times, the scheduler sleeps on the monotonic clock. It used to sleep
the whole time to the next due time in one go: a message at delay level 2 whose wake-up came
while the clock was stepped back an hour slept that hour, long after the clock was put right.
Here both clocks are fake: ``Clocks.advance`` moves them together (time passing), ``step``
moves the wall clock alone (NTP, ``date -s``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from pocketmq.broker import DEFAULT_DELAY_LEVELS
from pocketmq.broker.schedule import MAX_SLEEP, ScheduleService
from pocketmq.store import MessageStore, PutResult, PutStatus, StoreConfig, StoreMessage


class _Timer:
    def __init__(self, clocks: Clocks, at: float, callback: Callable[[], None]) -> None:
        self.at, self.callback, self.cancelled = at, callback, False
        heapq.heappush(clocks.timers, (at, next(clocks.order), self))

    def cancel(self) -> None:
        self.cancelled = True


class Clocks:
    """A fake wall clock and a fake monotonic timer (``call_later``) driven by the test."""

    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.monotonic = 0.0
        self.timers: list[tuple[float, int, _Timer]] = []
        self.order = itertools.count()

    def __call__(self) -> float:
        return self.wall

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        return _Timer(self, self.monotonic + delay, callback)

    def step(self, seconds: float) -> None:
        self.wall += seconds

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass on both clocks, firing the timers due on the way."""
        end = self.monotonic + seconds
        while self.timers and self.timers[0][0] <= end:
            at, _, timer = heapq.heappop(self.timers)
            self.wall += at - self.monotonic
            self.monotonic = at
            if not timer.cancelled:
                timer.callback()
                await _settle()
        self.wall += end - self.monotonic
        self.monotonic = end
        await _settle()


async def _settle() -> None:
    for _ in range(20):  # let the scheduler task run what the timer woke it for
        await asyncio.sleep(0)


def _message(body: bytes) -> StoreMessage:
    return StoreMessage(topic="orders", queue_id=0, body=body)


async def _scheduler(tmp_path: Path, clocks: Clocks) -> tuple[MessageStore, ScheduleService]:
    store = MessageStore.open(str(tmp_path / "store"), StoreConfig(min_free_disk_bytes=0))

    async def append(messages: list[StoreMessage]) -> list[PutResult]:
        return store.append(messages)

    schedule = ScheduleService(
        store, str(tmp_path), DEFAULT_DELAY_LEVELS, append, clocks, call_later=clocks.call_later
    )
    return store, schedule


async def test_a_clock_stepped_back_and_put_right_delays_a_level_message_by_at_most_a_second(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    store, schedule = await _scheduler(tmp_path, clocks)
    held = schedule.schedule_level(_message(b"level-2"), 2, int(clocks.wall * 1000))  # 5 s
    assert store.append([held])[0].status.stored
    await schedule.start()
    try:
        await _settle()
        await clocks.advance(1)
        clocks.step(-3600)  # the clock goes back an hour...
        await clocks.advance(9)  # ...over the moment the message was due (5 s)
        assert store.max_offset("orders", 0) == 0  # by this clock it is not due yet
        clocks.step(+3600)  # put right: the message is 5 s overdue
        await clocks.advance(MAX_SLEEP)
        assert store.max_offset("orders", 0) == 1
    finally:
        await schedule.close()
        store.close()


async def test_a_clock_stepped_forward_releases_what_it_made_due_within_a_second(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    store, schedule = await _scheduler(tmp_path, clocks)
    now_ms = int(clocks.wall * 1000)
    held = [
        schedule.schedule_level(_message(b"level-18"), 18, now_ms),  # 2 h
        schedule.schedule_at(_message(b"timer"), now_ms + 3_000_000),  # 50 min
    ]
    assert all(r.status.stored for r in store.append(held))
    await schedule.start()
    try:
        await _settle()
        await clocks.advance(5)
        assert store.max_offset("orders", 0) == 0
        clocks.step(+7200)  # both are due by the new clock (docs: a step forward releases early)
        await clocks.advance(MAX_SLEEP)
        assert store.max_offset("orders", 0) == 2
    finally:
        await schedule.close()
        store.close()


async def test_a_refused_release_is_retried_and_reported_on_time_after_a_step_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clocks = Clocks()
    store = MessageStore.open(str(tmp_path / "store"), StoreConfig(min_free_disk_bytes=0))

    tried: list[bytes] = []

    async def full_disk(messages: list[StoreMessage]) -> list[PutResult]:
        tried.extend(m.body for m in messages)
        return [PutResult(status=PutStatus.DISK_FULL) for _ in messages]

    schedule = ScheduleService(store, str(tmp_path), DEFAULT_DELAY_LEVELS, full_disk, clocks)
    long_due = int(clocks.wall * 1000) - 7_200_000  # due two hours ago: due under either clock
    held = [
        schedule.schedule_at(_message(b"timer"), long_due),
        schedule._hold(_message(b"level"), "%SYS%SCHEDULE", 0, long_due, {}),
    ]
    assert all(r.status.stored for r in store.append(held))
    with caplog.at_level(logging.WARNING, "pocketmq.broker"):
        await schedule._deliver_due()
        clocks.step(-3600)
        for _ in range(70):  # 70 s of a disk that stays full, by the stepped clock
            clocks.wall += 1
            await schedule._deliver_due()
    refused = [r for r in caplog.records if "were not stored" in r.getMessage()]
    assert len(refused) == 3  # at the first refusal, at the step, a minute later
    # each is tried again every second (a refused timer message used to wait for the wall
    # clock to come back to "a second after the refusal": an hour)
    assert tried.count(b"timer") >= 60
    assert tried.count(b"level") >= 60
    store.close()
