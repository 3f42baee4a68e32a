"""Reported successes are recorded a slice per event-loop turn, and a full intake only counts."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from pocketmq.broker import Broker, BrokerConfig
from pocketmq.broker import history as history_module
from pocketmq.model import Attempt


def _successes(count: int) -> list[Attempt]:
    return [
        Attempt(f"M{n:08d}", "g", "orders", 1, "c-1", "SUCCESS", "", 1_000, 2_000)
        for n in range(count)
    ]


async def test_a_large_report_is_recorded_a_slice_per_turn_and_all_of_it_arrives(
    tmp_path: Path,
) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    try:
        await asyncio.sleep(0)  # let the intake task reach its wait
        history = broker.history
        broker.report_outcomes("g", "", _successes(2_000))
        assert history.recorded == 0  # nothing is recorded in the handler's own turn
        per_turn = []
        while history.recorded < 2_000:
            before = history.recorded
            await asyncio.sleep(0)
            per_turn.append(history.recorded - before)
            assert len(per_turn) < 1_000, "the intake stopped draining"
        assert max(per_turn) <= 32  # no turn holds deliveries up for the whole report
        assert [a.consumer for a in broker.message_history("M00001999")] == ["c-1"]
        assert history.outcomes[("SUCCESS", "g")] == 2_000
    finally:
        await broker.close()


async def test_a_full_intake_counts_what_it_cannot_keep_and_a_query_sees_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_module, "_INTAKE_LIMIT", 100)
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    try:
        broker.report_outcomes("g", "", _successes(150))
        assert broker.history.dropped == 50
        assert broker.history.outcomes[("SUCCESS", "g")] == 50  # the dropped are still counted
        # a query records what is waiting first, so it sees its own recent attempts
        assert len(broker.message_history("M00000099")) == 1
        assert broker.message_history("M00000120") == []
        assert broker.history.outcomes[("SUCCESS", "g")] == 150
    finally:
        await broker.close()


async def test_reports_of_a_broker_without_history_are_counted_only(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), record_history=False))
    await broker.start()
    try:
        broker.report_outcomes("g", "", _successes(10))
        assert broker.history.outcomes[("SUCCESS", "g")] == 10
        assert broker.history.dropped == 0
        assert broker.message_history("M00000001") == []
    finally:
        await broker.close()


async def test_reports_waiting_when_the_history_is_turned_off_are_not_written(
    tmp_path: Path,
) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    await broker.start()
    try:
        broker.report_outcomes("g", "", _successes(10))
        broker.history.enabled = False  # as a master that is demoted to a slave
        broker.history.flush()
        assert broker.history.recorded == 0
        assert broker.history.outcomes[("SUCCESS", "g")] == 10
    finally:
        await broker.close()


def test_a_slice_is_counted_and_buffered_as_before() -> None:
    """Slices alike or mixed (outcomes, groups, consumers, no message id, long errors) leave the
    same counters and buffer as the per-entry checks before (docs/benchmarks.md, "Broker
    consume path, compiled entries' loop (issue 32)")."""
    rng = random.Random(32)
    for _ in range(400):
        group = rng.choice(["g", "h"])
        consumer = rng.choice(["", "c-1", "c-2"])
        attempts = [
            Attempt(
                rng.choice([f"M{n}", f"M{n}", f"M{n}", ""]),
                rng.choice(["g", "g", "g", "h"]),
                "orders",
                1,
                rng.choice(["c-1", "c-1", "c-2"]),
                rng.choice(["SUCCESS"] * 6 + ["RECONSUME_LATER", "EXCEPTION"]),
                rng.choice(["", "", "boom", "x" * 2_500]),
                1_000,
                2_000,
            )
            for n in range(rng.choice([0, 1, 5, 32]))
        ]
        if rng.random() < 0.5:  # a consumer's report: all alike
            attempts = [
                msgspec.structs.replace(attempts[0], message_id=f"M{n}")
                for n in range(len(attempts))
            ]
        history = history_module.AttemptHistory(None, float)  # type: ignore[arg-type]
        history._take(group, consumer, attempts)
        # every attempt counted under the report's group; every one with a message id buffered
        # with the report's group and consumer and its error cut (unchanged when already so)
        assert history.outcomes == Counter((attempt.outcome, group) for attempt in attempts)
        as_reported = [
            msgspec.structs.replace(
                attempt,
                group=group,
                consumer=consumer or attempt.consumer,
                error=attempt.error[:2_000],
            )
            for attempt in attempts
            if attempt.message_id
        ]
        assert (history._buffer, history.recorded) == (as_reported, len(as_reported))
