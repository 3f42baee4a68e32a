"""Flow control's load signals, on a fake clock: a stalled event loop refuses sends and the
stall is remembered for a few ticks; flush backlog and queue caps likewise (docs/semantics.md,
"Flow control")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from pocketmq.broker.flow import FlowControl


class SteppedClock:
    """Returns the given readings in turn, then repeats the last one."""

    def __init__(self, readings: list[float]) -> None:
        self._readings: Iterator[float] = iter(readings)
        self.last = readings[0]
        self.calls = 0
        self._waiters: dict[int, asyncio.Event] = {}

    def __call__(self) -> float:
        self.calls += 1
        self.last = next(self._readings, self.last)
        for calls, event in self._waiters.items():
            if self.calls >= calls:
                event.set()
        return self.last

    async def read(self, calls: int) -> None:
        """Wait until the clock has been read ``calls`` times."""
        event = self._waiters.setdefault(calls, asyncio.Event())
        if self.calls >= calls:
            event.set()
        async with asyncio.timeout(5):
            await event.wait()


def flow(clock: SteppedClock | None = None, **overrides: object) -> FlowControl:
    settings: dict[str, object] = {
        "max_queue_wait": 0.2,
        "max_pending_flushes": 10,
        "max_queue_backlog": None,
    }
    settings.update(overrides)
    if clock is not None:
        settings["clock"] = clock
    return FlowControl(**settings)  # type: ignore[arg-type]


async def test_a_stalled_loop_refuses_sends_until_the_stall_has_decayed() -> None:
    # Tick 1 wakes 300 ms late; ticks 2 and 3 on time.
    clock = SteppedClock([0.0, 0.301, 0.301, 0.302, 0.302, 0.303])
    control = flow(clock)
    control.start(tick=0.001)
    try:
        await clock.read(2)
        assert control.overload_reason(store_busy=False) == (
            "requests are waiting 300 ms to be served"
        )
        await clock.read(4)
        assert 0.14 < control.lag < 0.16  # halved: still remembered, under the limit
        assert control.overload_reason(store_busy=False) is None
    finally:
        await control.stop()


def test_lag_at_the_limit_is_accepted() -> None:
    control = flow()
    control.lag = 0.2
    assert control.overload_reason(store_busy=False) is None
    control.lag = 0.2001
    assert control.overload_reason(store_busy=False) is not None


def test_other_signals() -> None:
    control = flow(max_queue_backlog=3)
    assert control.overload_reason(store_busy=True) == (
        "the store is busy (an append is taking longer than 1 s)"
    )
    control.pending_flushes = 11
    assert control.overload_reason(store_busy=False) == "11 sends are waiting for a disk flush"
    assert not control.backlog_exceeded(2)
    assert control.backlog_exceeded(3)
    assert not flow().backlog_exceeded(10**9)  # no cap configured


async def test_a_restart_forgets_the_stalls_of_starting_up() -> None:
    # the first tick wakes 300 ms late (a server starting its listeners on the loop)
    clock = SteppedClock([0.0, 0.301, 0.301, 0.302, 0.302, 0.303])
    control = flow(clock)
    control.start(tick=0.001)
    try:
        await clock.read(2)
        assert control.overload_reason(store_busy=False) is not None
        await control.restart()  # the server is up
        assert control.lag == 0.0
        assert control.overload_reason(store_busy=False) is None
        await clock.read(4)  # and measuring goes on
        assert control.overload_reason(store_busy=False) is None
    finally:
        await control.stop()
