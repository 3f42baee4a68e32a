"""The broker's side of high availability (docs/replication.md): what a master tracks of its
slaves, the replicated log's identity and epochs, how fast a slave catches up, and the copy of
a master's state files a slave keeps.

:class:`HaFront` is the one door the server's HA code (server/ha/) goes through,
``broker.ha``: it names the three parts replication needs and nothing else of the broker, so
the rest of the broker's state stays behind :class:`pocketmq.broker.Broker`'s front.
"""

from __future__ import annotations

from pocketmq.broker.ha.replica_log import ReplicaLog
from pocketmq.broker.ha.replication import Replication, ReplicationMode, Role
from pocketmq.broker.ha.statecopy import StateCopy

__all__ = ["HaFront", "ReplicationMode", "Role"]


class HaFront:
    """What the HA servers read and drive: the replication state (slaves, lease, fences), the
    replica log (identity, epochs, what a crash lost) and the state copy (a master's files)."""

    def __init__(
        self, replication: Replication, replica_log: ReplicaLog, state_copy: StateCopy
    ) -> None:
        self.replication = replication
        self.replica_log = replica_log
        self.state_copy = state_copy
