"""The confirmed offset readers are held to never moves back (docs/replication.md §3).

Found by tests/replication/test_freeze.py under CPU load: after a failover the old master comes
back as a slave of the new one, far behind; once it acknowledges a position the master passed
within ``ha_max_lag_time`` and etcd lists it as a member, it enters the in-sync set and the
confirmed offset drops to what it holds. Messages answered OK and already readable are not
readable again until it catches up — a read in between misses them.
"""

from __future__ import annotations

import pytest

from .test_replication import append, timed


@pytest.mark.xfail(
    strict=True,
    reason="a slave enters the in-sync set behind the confirmed offset, which then moves back "
    "(RocketMQ's controller adds a slave to the sync state set only once it holds the "
    "confirmed offset)",
)
def test_a_slave_behind_entering_the_in_sync_set_does_not_move_the_confirmed_offset_back() -> None:
    state, log, clock = timed(max_lag_time=5.0)
    state.set_members(frozenset({1, 2}))  # the new master 1 and its slave 2
    state.slave_connected("slave", 2, "a", 0)
    for _ in range(40):  # 4 s of sends, each acknowledged by slave 2
        clock.now += 0.1
        end = append(state, log)
        state.acked("slave", end, end)
    assert log.visible_limit == state.confirmed == 4000
    state.slave_connected("old master", 0, "b", 0)  # back, catching up from far behind
    state.acked("old master", 1500, 1500)  # 1.5 s of the master's log so far
    state.set_members(frozenset({0, 1, 2}))  # etcd lists it as a member again
    assert log.visible_limit == state.confirmed == 4000
