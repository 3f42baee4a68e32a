"""The replication protocol's bodies (docs/replication.md §2).

A slave connects to its master's replication port with the native protocol's framing; these are
the MessagePack bodies of its requests and of the master's stream. A link opens with
``HA_LINK`` (and, when the group authenticates, ``HA_LINK_PROOF``: the cluster key's mutual,
channel-bound proofs of protocol/auth.py) before ``HA_HELLO``.
"""

from __future__ import annotations

from pocketmq.protocol.body import Body

__all__ = [
    "HaAck",
    "HaData",
    "HaEpoch",
    "HaHello",
    "HaHelloReply",
    "HaLinkChallenge",
    "HaLinkHello",
    "HaLinkProof",
    "HaMetadata",
    "HaOffsets",
]


class HaLinkHello(Body, frozen=True):
    """A slave (or a probe) opens a link: the group and broker id it speaks for, and a fresh
    random nonce its proof and the master's are bound to."""

    group: str
    broker_id: int
    nonce: str


class HaLinkChallenge(Body, frozen=True):
    """The master's answer to HA_LINK: whether it requires the cluster key, its challenge (a
    fresh random nonce, "" when it does not), the name its proofs are made for
    (``ha:<group>``), and its role and epoch now — ``master``, ``fenced`` (a master that may
    not write now: starting, waiting for its name server or controller, past its lease) or
    ``slave`` (believe them only once it proved the key)."""

    authentication: bool
    challenge: str
    server_name: str
    role: str
    epoch: int


class HaLinkProof(Body, frozen=True):
    """A proof of the cluster key: the slave's (request) or the master's (response)."""

    proof: str


class HaEpoch(Body, frozen=True):
    """A master term: its number and the log offset where it began."""

    number: int
    start: int


class HaHello(Body, frozen=True):
    """A slave introduces itself: who it is, and how much log it holds of which terms.

    ``missing_until``: the slave lacks records it once held up to this offset (a repair set
    them aside, and it copies them again): the master does not count it in sync before it has
    them. ``probe``: not a slave at all but a master checking a claim that its group has a newer
    master (docs/replication.md §6): the master answers and the link ends.
    """

    group: str
    cluster_id: str  # "" for a slave that has no data yet
    broker_id: int
    address: str  # the slave's native address, for routes
    log_end: int
    epochs: list[HaEpoch]
    missing_until: int = 0
    probe: bool = False


class HaHelloReply(Body, frozen=True):
    """The master's answer: its identity, its terms, and where the slave's copy must go on."""

    cluster_id: str
    epochs: list[HaEpoch]
    truncate_to: int  # the consistent point when the slave must cut its log there, else -1
    start: int  # the offset the stream begins at


class HaData(Body, frozen=True):
    """Raw commit-log bytes: whole records of one segment, at ``offset``; ``log_end`` is the
    master's end of log when it sent them (no data: a heartbeat of an idle link)."""

    offset: int
    data: bytes
    log_end: int = 0


class HaAck(Body, frozen=True):
    """How far the slave's log is written, and flushed; and whether it reaches the group's
    controller (0: no controller, 1: it does, 2: it does not; docs/replication.md §9)."""

    written: int
    flushed: int
    controller: int = 0


class HaMetadata(Body, frozen=True):
    """The master's state files by name (topics, groups, offsets, ...)."""

    files: dict[str, bytes]


class HaOffsets(Body, frozen=True):
    """What consumers did on a slave: committed offsets keyed ``group@topic@queue``, and the
    slave's pop state (pop.json's format) when it served pops while the master was away."""

    offsets: dict[str, int]
    pop_state: bytes = b""
