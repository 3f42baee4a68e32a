"""The flow-control backoff (gRPC's ConnectWithBackoff, docs/semantics.md "Producer"), driven by
a fake clock and a seeded random source."""

from __future__ import annotations

import random

import pytest

from pocketmq.client import Backoff


def test_first_attempt_deadline_is_initial_backoff_without_jitter() -> None:
    schedule = Backoff().schedule(random.Random(1))
    retry_at, attempt_deadline = schedule.start_attempt(now=100.0)
    assert retry_at == 101.0
    assert attempt_deadline == 120.0  # max(deadline, now + MIN_CONNECT_TIMEOUT 20 s)


def test_backoff_grows_by_1_6_with_20_percent_jitter_up_to_120_s() -> None:
    rng = random.Random(42)
    schedule = Backoff().schedule(rng)
    clock = 0.0
    retry_at, _ = schedule.start_attempt(clock)
    waits = [retry_at - clock]
    expected_backoff = 1.0
    for _ in range(15):
        clock = retry_at  # sleep until the deadline, then attempt again
        retry_at, attempt_deadline = schedule.start_attempt(clock)
        expected_backoff = min(expected_backoff * 1.6, 120.0)
        wait = retry_at - clock
        assert expected_backoff * 0.8 <= wait <= expected_backoff * 1.2
        assert attempt_deadline == max(retry_at, clock + 20.0)
        waits.append(wait)
    assert waits[0] == 1.0
    assert max(waits) <= 144.0
    assert schedule.current_backoff == 120.0


def test_the_schedule_is_reproducible_with_the_same_seed() -> None:
    def run(seed: int) -> list[float]:
        schedule = Backoff().schedule(random.Random(seed))
        out, clock = [], 0.0
        for _ in range(8):
            retry_at, _ = schedule.start_attempt(clock)
            out.append(retry_at - clock)
            clock = retry_at
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_time_spent_in_a_slow_attempt_counts_towards_the_wait() -> None:
    schedule = Backoff().schedule(random.Random(0))
    retry_at, _ = schedule.start_attempt(0.0)
    # the attempt itself took 0.7 s and failed: only 0.3 s remain to sleep
    assert retry_at - 0.7 == pytest.approx(0.3)


def test_custom_policy() -> None:
    schedule = Backoff(
        initial=0.5, multiplier=2.0, jitter=0.0, maximum=3.0, min_connect_timeout=1.0
    ).schedule()
    deadlines = []
    clock = 0.0
    for _ in range(5):
        retry_at, _ = schedule.start_attempt(clock)
        deadlines.append(retry_at - clock)
        clock = retry_at
    assert deadlines == [0.5, 1.0, 2.0, 3.0, 3.0]
