"""The commit log as replication sees it: identity, epochs, and where a slave's copy goes on.

The replication port (server/ha) moves bytes; the decisions about them are made here, next to
the store (docs/replication.md §1, §2, §4): whether a slave's log belongs to this cluster, how
much of it is the same history as the master's (the consistent point), what it must cut, and
where the stream begins. Epochs travel as ``(number, start)`` pairs so the transport needs no
store types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.store import MessageStore
from pocketmq.store.epochs import Epoch, consistent_point
from pocketmq.store.identity import StoreIdentity, read_identity, write_identity
from pocketmq.store.quarantine import LostEntry

__all__ = ["EpochPair", "FollowPlan", "Missing", "ReplicaLog", "ReplicaRefused"]

EpochPair = tuple[int, int]
"""An epoch on the wire: its number and the log offset where it began."""


class ReplicaRefused(Exception):
    """A replication link that cannot go on: another group or cluster, no shared history, a
    slave too far behind, or a master that streams from elsewhere. The text says what to do."""


class FollowPlan:
    """The master's answer to a slave: cut at ``truncate_to`` (-1: nothing to cut), then copy
    from ``start``; ``epochs`` are the master's terms."""

    __slots__ = ("cluster_id", "epochs", "start", "truncate_to")

    def __init__(
        self, cluster_id: str, epochs: list[EpochPair], truncate_to: int, start: int
    ) -> None:
        self.cluster_id = cluster_id
        self.epochs = epochs
        self.truncate_to = truncate_to
        self.start = start


@dataclass(frozen=True, slots=True)
class Missing:
    """What a replica lacks of the log it once held: from ``start`` up to ``until``. ``lost``:
    the queued messages known to be there (those a repair set aside; records cut to be copied
    again are not listed one by one)."""

    start: int
    until: int
    lost: list[LostEntry] = field(default_factory=list)

    def describe(self) -> str:
        """In words, for a refused promotion or election (docs/replication.md §6)."""
        text = f"log bytes {self.start}-{self.until} ({self.until - self.start} bytes"
        if self.lost:
            shown = ", ".join(f"{e.topic}/{e.queue_id}@{e.queue_offset}" for e in self.lost[:5])
            more = f" and {len(self.lost) - 5} more" if len(self.lost) > 5 else ""
            text += f"; {len(self.lost)} queued message(s) set aside by a repair: {shown}{more}"
        return text + ")"


class ReplicaLog:
    """One store's log, for the master's and the slave's side of a replication link."""

    def __init__(self, store: MessageStore, group: str) -> None:
        self._store = store
        self.group = group

    # -- what both sides read -------------------------------------------------------------

    @property
    def end(self) -> int:
        """Where the log ends (what this broker has written)."""
        return self._store.write_position

    @property
    def flushed(self) -> int:
        """How much of the log is on disk."""
        return self._store.flushed_position

    def epochs(self) -> list[EpochPair]:
        """This log's terms, oldest first, as ``(number, start)`` pairs."""
        return [(e.number, e.start) for e in self._store.epochs.entries]

    def current_epoch(self) -> int:
        """The newest term this log knows (0: none yet)."""
        current = self._store.epochs.current
        return current.number if current is not None else 0

    def cluster_id(self) -> str:
        """The cluster this store belongs to ("" before it has met a master)."""
        identity = read_identity(self._store.directory)
        return identity.cluster_id if identity is not None else ""

    def missing(self) -> Missing | None:
        """What this log lacks of what it once held (None: nothing): damaged ranges still in it
        (a repair set them aside), or records it cut to copy them again and has not yet. A
        slave missing records is neither in sync nor electable (docs/replication.md §4, §6)."""
        store = self._store
        end = store.write_position
        holes = store.replica.holes()
        pending = store.replica.pending
        if holes:
            lost = [entry for hole in holes for entry in hole.lost]
            return Missing(holes[0].start, max(end, pending), lost)
        if pending > end:
            return Missing(end, pending)
        return None

    def has_hole(self) -> bool:
        """Whether a damaged range was set aside inside this log (to be copied again)."""
        return bool(self._store.replica.holes())

    def give_up_missing(self) -> None:
        """A forced promotion: what this log lacked is lost for good; stop waiting for it."""
        self._store.replica.settled()

    def ensure_identity(self) -> None:
        """A master's store gets an identity when it first serves slaves."""
        if read_identity(self._store.directory) is None:
            write_identity(self._store.directory, StoreIdentity.new(self.group))

    # -- the master's side ----------------------------------------------------------------

    def plan(
        self, group: str, cluster_id: str, epochs: list[EpochPair], log_end: int
    ) -> FollowPlan:
        """Where a slave that holds ``log_end`` bytes of these ``epochs`` goes on; raises
        :class:`ReplicaRefused` when it must start over from an empty directory."""
        if group != self.group:
            raise ReplicaRefused(f"this master is of group {self.group!r}, not {group!r}")
        mine = self.cluster_id()
        if cluster_id and cluster_id != mine:
            raise ReplicaRefused(
                "the slave's store belongs to another cluster (identity differs); give it an "
                "empty data directory to copy this master"
            )
        store = self._store
        low = store.min_physical_offset
        truncate_to = -1
        if log_end == 0:
            # an empty slave (whatever terms it heard of: a group that never wrote a record
            # still changes epochs): from the oldest record this master still has
            start = low
        else:
            theirs = [Epoch(number, begin) for number, begin in epochs]
            point = consistent_point(theirs, log_end, list(store.epochs.entries), self.end)
            if point < 0:
                raise ReplicaRefused(
                    "the slave's log shares no history with this master's; give it an empty "
                    "data directory"
                )
            if point < log_end:
                truncate_to = point
            start = point
        if start < low:
            raise ReplicaRefused(
                f"the slave is behind the oldest record this master keeps ({start} < {low}); "
                "give it an empty data directory"
            )
        return FollowPlan(mine, self.epochs(), truncate_to, start)

    def read(self, position: int, max_bytes: int) -> bytes:
        """Whole records from ``position`` for a slave (b"": nothing readable there yet)."""
        return self._store.read_log(position, max_bytes)

    # -- the slave's side -----------------------------------------------------------------

    def follow(self, plan: FollowPlan) -> None:
        """Take the master's answer: adopt its cluster, cut what its history does not have,
        begin where its log begins, and take its epochs."""
        store = self._store
        identity = read_identity(store.directory)
        if identity is None:
            write_identity(store.directory, StoreIdentity(self.group, plan.cluster_id))
        elif identity.cluster_id != plan.cluster_id:
            raise ReplicaRefused("the master belongs to another cluster (store identity differs)")
        holes = store.replica.holes()
        if holes:  # what a repair set aside, and everything after it, comes again (§4)
            store.replica.refetch(holes[0].start)
        if 0 <= plan.truncate_to < store.write_position:
            store.cut_replica(plan.truncate_to, "the master's history does not have it")
        if store.write_position == 0 and plan.start > 0:
            store.start_replica_at(plan.start)
        if store.write_position != plan.start:
            raise ReplicaRefused(
                f"the master streams from {plan.start} but this log ends at {store.write_position}"
            )
        store.epochs.adopt([Epoch(number, begin) for number, begin in plan.epochs])

    def append(self, offset: int, data: bytes, written: Callable[[int], None] | None = None) -> int:
        """Write a verified chunk from the master; raises StoreError when it cannot.
        ``written(end)``: called once it is in the log, before its records are dispatched."""
        return self._store.append_replica(offset, data, written)
