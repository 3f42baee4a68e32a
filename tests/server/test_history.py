"""The charts' history (server/http/history.py, sampler.py; docs/operations.md, "Charts"): ring
buffers of a fixed size per series, a day tier of 5-minute means, a cap on series that refuses
newcomers and keeps what exists, the memory of a full day of 1,000 series, and a sampler that
turns the broker's counters into rates on a fake clock."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage
from pocketmq.server.http.history import COARSE_EVERY, COARSE_POINTS, FINE_POINTS, History
from pocketmq.server.http.sampler import Sampler


def _gaps(values: list[float]) -> int:
    return sum(1 for v in values if math.isnan(v))


def test_the_hour_tier_keeps_its_last_360_points_oldest_first() -> None:
    history = History(10.0)
    for n in range(FINE_POINTS + 40):
        history.record(1000.0 + 10 * n, {("in", ""): float(n)})
    reading = history.read([("in", "")], "hour")
    assert reading.step == 10.0
    assert len(reading.times) == FINE_POINTS
    assert reading.series[("in", "")] == [float(n) for n in range(40, FINE_POINTS + 40)]
    assert reading.times[0] == 1000.0 + 400
    assert reading.times[-1] == 1000.0 + 10 * 399


def test_the_day_tier_holds_means_of_30_samples_and_wraps_after_a_day() -> None:
    history = History(10.0)
    samples = COARSE_EVERY * (COARSE_POINTS + 5)
    for n in range(samples):
        history.record(10.0 * n, {("lag", "g"): float(n)})
    reading = history.read([("lag", "g")], "day")
    assert reading.step == 300.0
    values = reading.series[("lag", "g")]
    assert len(values) == COARSE_POINTS
    # the last point: the mean of the last 30 samples
    assert values[-1] == pytest.approx(sum(range(samples - 30, samples)) / 30)
    assert values[0] == pytest.approx(sum(range(5 * 30, 6 * 30)) / 30)


def test_a_series_born_later_has_gaps_before_and_a_gone_one_is_dropped() -> None:
    history = History(1.0)
    for n in range(5):
        values = {("in", ""): 1.0}
        if n >= 3:
            values[("lag", "late")] = 7.0
        history.record(float(n), values)
    late = history.read([("lag", "late")]).series[("lag", "late")]
    assert _gaps(late) == 3
    assert late[3:] == [7.0, 7.0]
    history.record(5.0, {("in", ""): 1.0})  # the group is gone
    assert ("lag", "late") not in history.recorded()
    assert _gaps(history.read([("lag", "late")]).series[("lag", "late")]) == 6


def test_a_full_history_refuses_new_series_and_keeps_the_old_ones() -> None:
    history = History(1.0, max_series=3)
    history.record(0.0, {("in", ""): 1.0, ("lag", "a"): 1.0, ("lag", "b"): 1.0})
    history.record(1.0, {("in", ""): 2.0, ("lag", "a"): 2.0, ("lag", "b"): 2.0, ("lag", "c"): 9})
    assert history.refused == 1
    assert sorted(history.recorded()) == [("in", ""), ("lag", "a"), ("lag", "b")]
    assert history.read([("lag", "a")]).series[("lag", "a")] == [1.0, 2.0]
    # a deleted group makes room: the refused series is recorded from then on
    history.record(2.0, {("in", ""): 3.0, ("lag", "a"): 3.0, ("lag", "c"): 9.0})
    assert history.refused == 0
    assert history.read([("lag", "c")]).series[("lag", "c")][-1] == 9.0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        History(11.0)
    with pytest.raises(ValueError, match="interval"):
        History(0.0)
    with pytest.raises(ValueError, match="at least one"):
        History(10.0, max_series=0)


def test_a_day_of_1000_series_fits_in_three_megabytes() -> None:
    """The memory docs/operations.md states: 1,000 series over both tiers. The rings are made
    whole when a series is born, so what one sample takes is what a full day takes; more samples
    (both tiers written) take nothing more."""
    values = {("lag", f"group-{n}"): float(n) for n in range(1000)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        history = History(10.0, max_series=1000)
        history.record(0.0, values)
        used = tracemalloc.get_traced_memory()[0] - before
        for n in range(1, 2 * COARSE_EVERY + 1):
            history.record(10.0 * n, values)
        grown = tracemalloc.get_traced_memory()[0] - before - used
    finally:
        tracemalloc.stop()
    assert len(history.recorded()) == 1000
    assert history.coarse.count == 2
    print(f"history of 1000 series, an hour and a day: {used / 1e6:.2f} MB")
    assert used < 3.0e6
    assert grown < 50_000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    broker.create_topic("T", queues=2)
    broker.create_group(GroupConfig(name="billing"))
    yield broker
    await broker.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 5.0

    def monotonic(self) -> float:
        return self.now

    def process(self) -> float:
        return self.cpu


async def test_the_sampler_turns_counters_into_rates_and_groups_into_series(
    broker: Broker,
) -> None:
    clock = _Clock()
    history = History(10.0)
    sampler = Sampler(
        broker,
        history,
        monotonic=clock.monotonic,
        wall=lambda: clock.now + 1e9,
        cpu=clock.process,
    )
    sampler.sample()  # the first reading: no rate yet
    assert sampler.latest.rate_in == -1.0
    broker.send_now([InboundMessage("T", b"x", queue_id=q % 2) for q in range(50)])
    clock.now += 10.0
    clock.cpu += 2.5  # a quarter of a core over 10 s
    sampler.sample()
    assert sampler.latest.rate_in == 5.0
    assert sampler.latest.cpu_percent == 25.0
    broker.commit_offsets("billing", [("T", 0, 5), ("T", 1, 5)])
    clock.now += 10.0
    sampler.sample()
    reading = history.read([("in", ""), ("cpu", ""), ("lag", "billing"), ("disk_used", "")])
    rates = reading.series[("in", "")]
    assert math.isnan(rates[0])
    assert rates[1:] == [5.0, 0.0]
    assert reading.series[("cpu", "")][1] == 25.0
    assert reading.series[("lag", "billing")][-1] == 40.0  # 50 stored, 10 committed
    assert reading.series[("disk_used", "")][-1] > 0
    assert ("dlq", "billing") in history.recorded()
    assert ("retry", "billing") in history.recorded()
