"""The confirmed offset readers are held to never moves back (docs/replication.md §3).

Found by tests/replication/test_freeze.py under CPU load: after a failover the old master came
back as a slave of the new one, far behind; once it acknowledged a position the master passed
within ``ha_max_lag_time`` and etcd listed it as a member, it entered the in-sync set and the
confirmed offset dropped to what it held. Messages answered OK and already readable were not
readable again until it caught up — a read in between missed them (reported as "acknowledged
messages lost"). A slave now joins only holding the confirmed offset.
"""

from __future__ import annotations

from .test_replication import append, timed


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
