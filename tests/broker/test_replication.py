"""The master's replication state: what a send waits for, the in-sync set, and the confirmed
offset readers are held to (docs/replication.md §3)."""

from __future__ import annotations

import asyncio
from typing import Any

from pocketmq.broker.ha.replication import ReplicaOutcome, Replication, ReplicationMode, Role


class FakeLog:
    """The two things replication asks of the store: its end, and the readers' limit."""

    def __init__(self) -> None:
        self.write_position = 0
        self.visible_limit: int | None = None
        self.replica_of = ""

    def set_visible_limit(self, limit: int | None) -> None:
        self.visible_limit = limit


def replication(mode: ReplicationMode, **options: Any) -> tuple[Replication, FakeLog, list[Any]]:
    log = FakeLog()
    woken: list[set[tuple[str, int]]] = []
    state = Replication(
        log,  # type: ignore[arg-type]
        role=Role.MASTER,
        mode=mode,
        max_gap=options.get("max_gap", 1000),
        sync_timeout=options.get("sync_timeout", 5.0),
        wake=woken.append,
        max_lag_time=options.get("max_lag_time", 5.0),
    )
    return state, log, woken


async def test_async_mode_never_waits_and_never_limits_readers() -> None:
    state, log, _ = replication(ReplicationMode.ASYNC)
    log.write_position = 500
    assert await state.wait(500) is ReplicaOutcome.REPLICATED
    state.slave_connected("s", 1, "x", 0)
    assert log.visible_limit is None


async def test_sync_without_a_slave_in_sync_answers_at_once() -> None:
    state, log, _ = replication(ReplicationMode.SYNC, max_gap=100)
    log.write_position = 1000
    assert await state.wait(1000) is ReplicaOutcome.SLAVE_NOT_AVAILABLE
    state.slave_connected("far", 1, "x", 0)  # connected, but 1000 bytes behind
    assert state.in_sync() == []
    assert await state.wait(1000) is ReplicaOutcome.SLAVE_NOT_AVAILABLE


async def test_a_sync_send_is_answered_when_a_slave_acknowledges_it() -> None:
    state, log, _ = replication(ReplicationMode.SYNC)
    state.slave_connected("s", 1, "x", 0)
    log.write_position = 300
    waiting = asyncio.create_task(state.wait(300))
    await asyncio.sleep(0)
    assert not waiting.done()
    state.acked("s", 200, 200)  # not far enough yet
    await asyncio.sleep(0)
    assert not waiting.done()
    state.acked("s", 300, 300)
    assert await waiting is ReplicaOutcome.REPLICATED


async def test_a_slave_that_does_not_acknowledge_in_time_gives_flush_slave_timeout() -> None:
    state, log, _ = replication(ReplicationMode.SYNC, sync_timeout=0.01)
    state.slave_connected("s", 1, "x", 0)
    log.write_position = 10
    assert await state.wait(10) is ReplicaOutcome.FLUSH_SLAVE_TIMEOUT


async def test_readers_are_held_to_the_lowest_in_sync_acknowledgement() -> None:
    state, log, woken = replication(ReplicationMode.SYNC)
    state.slave_connected("a", 1, "x", 0)
    state.slave_connected("b", 2, "y", 0)
    assert log.visible_limit == 0
    log.write_position = 100
    assert state.defer(100, {("T", 0)})  # not confirmed yet: its readers wait
    state.acked("a", 100, 100)
    assert log.visible_limit == 0  # b has not got it
    assert woken == []
    state.acked("b", 100, 100)
    assert log.visible_limit == 100
    assert woken == [{("T", 0)}]


async def test_without_slaves_in_sync_readers_are_not_held_back() -> None:
    state, log, woken = replication(ReplicationMode.SYNC)
    state.slave_connected("a", 1, "x", 0)
    log.write_position = 100
    assert state.defer(100, {("T", 1)})
    state.slave_gone("a")  # the only slave left: sends answer SLAVE_NOT_AVAILABLE, reads go on
    assert log.visible_limit is None
    assert woken == [{("T", 1)}]
    assert not state.defer(200, {("T", 1)})


def test_a_slave_knows_how_far_behind_it_was_at_the_last_contact() -> None:
    state, log, _ = replication(ReplicationMode.ASYNC, max_gap=50)
    state.role = Role.SLAVE
    assert state.gap() == -1
    assert not state.caught_up()  # never met its master: not known to be in sync
    log.write_position = 900
    state.heard_from_master(1000)
    assert state.gap() == 100
    assert not state.caught_up()
    log.write_position = 960
    assert state.caught_up()


def test_the_time_from_append_to_acknowledgement_is_measured_per_record_end() -> None:
    state, _, _ = replication(ReplicationMode.ASYNC)
    state.grew(50)  # no slave: nothing to measure
    state.slave_connected("s", 1, "x", 0)
    state.grew(100)
    state.grew(200)
    state.acked("s", 150, 150)  # covers the first end only
    assert len(state.latencies) == 1
    state.acked("s", 200, 200)
    assert len(state.latencies) == 2
    figures = state.latency_ms()
    assert set(figures) == {"p50", "p99", "max"}
    assert 0 <= figures["p50"] <= figures["p99"] <= figures["max"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timed(max_lag_time: float = 3.0) -> tuple[Replication, FakeLog, FakeClock]:
    log = FakeLog()
    clock = FakeClock()
    state = Replication(
        log,  # type: ignore[arg-type]
        role=Role.MASTER,
        mode=ReplicationMode.SYNC,
        max_gap=1 << 30,
        sync_timeout=5.0,
        wake=lambda _: None,
        max_lag_time=max_lag_time,
        clock=clock,
    )
    return state, log, clock


def append(state: Replication, log: FakeLog, size: int = 100) -> int:
    log.write_position += size
    state.grew(log.write_position)
    return log.write_position


async def test_a_silent_slave_leaves_the_in_sync_set_once_it_lacks_a_record_that_long() -> None:
    state, log, clock = timed()
    state.slave_connected("s", 1, "x", 0)
    for _ in range(60):  # idle: a caught-up slave, heard every second, stays in sync
        clock.now += 1
        state.acked("s", 0, 0)  # its acknowledgement of the master's heartbeat
    assert [s.broker_id for s in state.in_sync()] == [1]
    append(state, log)
    clock.now += 2.9
    assert [s.broker_id for s in state.in_sync()] == [1]  # within the bound: sends wait for it
    clock.now += 0.2
    assert state.in_sync() == []
    # a send now is answered at once instead of waiting for a slave that does not answer
    assert await state.wait(log.write_position) is ReplicaOutcome.SLAVE_NOT_AVAILABLE
    state.acked("s", log.write_position, log.write_position)  # it speaks again: back in sync
    assert [s.broker_id for s in state.in_sync()] == [1]


def test_a_slave_that_keeps_up_under_constant_appends_stays_in_sync() -> None:
    state, log, clock = timed()
    state.slave_connected("s", 1, "x", 0)
    previous = 0
    for _ in range(100):  # an append every 0.5 s, each acknowledged one step late
        end = append(state, log)
        state.acked("s", previous, previous)
        previous = end
        clock.now += 0.5
        assert len(state.in_sync()) == 1


def test_a_slave_that_lags_further_than_the_timeout_in_time_is_not_in_sync() -> None:
    state, log, clock = timed()
    state.slave_connected("s", 1, "x", 0)
    ends: list[int] = []
    for step in range(40):  # an append every 0.5 s, acknowledged 10 steps (5 s) late
        ends.append(append(state, log))
        if step >= 10:
            state.acked("s", ends[step - 10], ends[step - 10])
        clock.now += 0.5
    assert state.in_sync() == []


def test_under_a_controller_only_members_acknowledgements_count() -> None:
    state, _, _ = timed()
    state.slave_connected("a", 1, "x", 0)
    state.slave_connected("b", 2, "y", 0)
    state.set_members(frozenset({0, 2}))
    assert [s.broker_id for s in state.in_sync()] == [2]
    assert not state.is_member(1)
    state.set_members(None)
    assert [s.broker_id for s in state.in_sync()] == [1, 2]


async def test_readers_held_to_a_silent_slave_are_let_go_when_it_drops_out() -> None:
    state, log, woken = replication(ReplicationMode.SYNC, max_lag_time=0.05)
    state.slave_connected("s", 1, "x", 0)
    log.write_position = 100
    state.grew(100)
    assert state.defer(100, {("T", 0)})  # held: the slave has not got it yet
    assert log.visible_limit == 0
    await asyncio.sleep(0.2)  # nothing else happens: the expiry alone lets the readers go
    assert log.visible_limit is None
    assert woken == [{("T", 0)}]


def test_a_slave_that_acknowledges_nothing_leaves_the_in_sync_set_after_the_time_bound() -> None:
    """Issue 29 (5b): a slave a few bytes behind but silent for longer than ha_max_lag_time
    is not in sync (RocketMQ's haMaxTimeSlaveNotCatchup), however small its byte gap."""
    state, log, clock = timed(max_lag_time=5.0)
    state.slave_connected("s", 1, "x", 0)
    assert len(state.in_sync()) == 1
    for step in range(1, 50):  # the master writes; the slave stops acknowledging at 10
        clock.now += 0.2
        log.write_position = step * 100
        state.grew(log.write_position)
        if step <= 10:
            state.acked("s", log.write_position, 0)
    # the slave holds everything up to 1000, written at t=102; the bound ends at 107
    clock.now = 106.9
    assert len(state.in_sync()) == 1
    clock.now = 107.2
    assert state.in_sync() == []
    # it catches up: in sync again at once
    state.acked("s", log.write_position, 0)
    assert len(state.in_sync()) == 1


def test_a_slave_lagging_in_time_is_not_in_sync_even_while_it_acknowledges() -> None:
    """It keeps acknowledging, but what it holds is what the master had 6 s ago."""
    state, log, clock = timed(max_lag_time=5.0)
    state.slave_connected("s", 1, "x", 0)
    ends: list[tuple[float, int]] = []
    for step in range(1, 100):
        clock.now += 0.1
        log.write_position = step * 100
        state.grew(log.write_position)
        ends.append((clock.now, log.write_position))
        lagging = [end for at, end in ends if at <= clock.now - 6.0]
        if lagging:
            state.acked("s", lagging[-1], 0)
    assert state.in_sync() == []


def test_a_slave_missing_records_it_once_had_is_not_in_sync_until_it_has_them() -> None:
    """Issue 29 item 1: a repaired slave copies again from the first damaged record; it is
    not in sync (not electable) before it holds what it had before."""
    state, log, _ = timed()
    log.write_position = 5000
    state.grew(5000)
    state.slave_connected("s", 1, "x", 1000, missing_until=4000)
    state.acked("s", 3000, 0)
    assert state.in_sync() == []
    state.acked("s", 5000, 0)
    assert len(state.in_sync()) == 1


def test_a_slave_etcd_lists_late_is_counted_only_holding_the_confirmed_offset() -> None:
    """Under a controller a caught-up slave counts once etcd's isr names it; if the confirmed
    offset moved on meanwhile, it counts once it holds that offset, not before: readers' limit
    never moves back (docs/replication.md §2, item 4)."""
    state, log, clock = timed(max_lag_time=5.0)
    state.set_isr(frozenset({0, 1}))
    state.slave_connected("one", 1, "a", 0)
    state.slave_connected("two", 2, "b", 0)
    for _ in range(10):
        clock.now += 0.1
        end = append(state, log)
        state.acked("one", end, end)
        state.acked("two", end - 100, end - 100)  # a record behind, within every bound
    assert [s.broker_id for s in state.caught_up_slaves()] == [1, 2]
    assert [s.broker_id for s in state.in_sync()] == [1]
    assert state.confirmed == 1000
    state.set_isr(frozenset({0, 1, 2}))  # etcd stored the isr naming slave 2
    assert state.confirmed == log.visible_limit == 1000  # not 900: it is not counted yet
    assert [s.broker_id for s in state.in_sync()] == [1]
    state.acked("two", 1000, 1000)
    assert [s.broker_id for s in state.in_sync()] == [1, 2]
    assert state.confirmed == 1000


def test_the_first_slave_counted_behind_hides_nothing_readers_were_shown() -> None:
    """With no slave in sync readers read the whole log; the first slave counted, still a little
    behind (here: once etcd lists it), limits what comes next, not what they could already read."""
    state, log, clock = timed(max_lag_time=5.0)
    state.set_isr(frozenset({0}))  # a controller that has not listed the slave yet
    state.slave_connected("one", 1, "a", 0)
    for _ in range(10):
        clock.now += 0.1
        end = append(state, log)
        state.acked("one", end - 100, end - 100)
    assert log.visible_limit is None  # no slave counted: the master alone, all readable
    state.set_isr(frozenset({0, 1}))
    assert [s.broker_id for s in state.in_sync()] == [1]
    assert state.confirmed == log.visible_limit == 1000  # what readers were shown stays
    end = append(state, log)
    assert log.visible_limit == 1000  # the new record waits for the slave
    state.acked("one", end, end)
    assert log.visible_limit == state.confirmed == end
