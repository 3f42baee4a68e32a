"""Pop-mode consumption state: what is in flight, for whom, until when.

For each (group, topic, queue) the broker remembers the next offset never handed out, the
messages handed out but not yet acknowledged (each with a receipt-handle token, its delivery
attempt and the time it becomes visible again), and the offsets acknowledged out of order. The
committed offset is the smallest offset not yet acknowledged, so it never passes an unfinished
message. A message whose invisible time passes is handed out again with attempt + 1.

The state is snapshotted to ``config/pop.json`` every second and on shutdown. After a crash the
last snapshot is restored: anything handed out or acknowledged since is delivered again —
at-least-once, never lost.
"""

from __future__ import annotations

import heapq
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from pocketmq.broker.offsets import parse_queue_key
from pocketmq.broker.persist import Sink, save_json
from pocketmq.broker.statefile import StateFile
from pocketmq.errors import InvalidReceiptHandleError
from pocketmq.model.messages import Delivered

__all__ = ["Handle", "InFlight", "PopBatch", "PopManager", "PopQueue"]

# a delivered message's fields beside its body and properties (ids, offsets, handle, hosts)
_DELIVERED_OVERHEAD = 256


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class PopBatch(list[Delivered]):
    """The messages one pop hands out. Besides its count, a pop is bounded by bytes: its answer
    must fit in one frame of the native protocol (docs/protocol.md "Limits"). The bound is
    soft — the message that reaches it is still taken — so the caller leaves room for one
    message of the largest size."""

    def __init__(self, max_bytes: int | None) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.bytes = 0

    def append(self, message: Delivered) -> None:
        """Take a message and count its approximate encoded size against the byte bound."""
        super().append(message)
        size = len(message.body) + _DELIVERED_OVERHEAD
        for key, value in message.properties.items():
            size += _utf8_size(key) + _utf8_size(value)
        self.bytes += size

    @property
    def full_of_bytes(self) -> bool:
        """Whether the batch reached its byte bound: the pop stops taking messages (the rest wait
        for the next pop)."""
        return self.max_bytes is not None and self.bytes >= self.max_bytes


class InFlight(msgspec.Struct):
    """One handed-out message of a pop queue: its receipt token, when it becomes visible again, its
    attempt and to whom it went (for the history and FIFO blocking)."""

    token: str
    visible_at: float
    attempt: int
    consumer: str = ""
    delivered_at: float = 0.0
    message_group: str = ""
    message_id: str = ""


@dataclass(slots=True)
class PopQueue:
    """One (group, topic, queue)."""

    next_offset: int
    committed: int
    inflight: dict[int, InFlight] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    # FIFO only: messages read but not handed out because their group was busy (offset -> group)
    parked: dict[int, str] = field(default_factory=dict)
    # (visible_at, offset, token): lazily cleaned; stale entries are skipped
    _timers: list[tuple[float, int, str]] = field(default_factory=list)

    def hand_out(
        self,
        offset: int,
        attempt: int,
        visible_at: float,
        consumer: str,
        now: float,
        message_group: str = "",
        message_id: str = "",
    ) -> str:
        """Mark ``offset`` in flight until ``visible_at`` and return the token of its receipt
        handle; the expiry timer is scheduled with it."""
        token = secrets.token_hex(6)
        self.inflight[offset] = InFlight(
            token, visible_at, attempt, consumer, now, message_group, message_id
        )
        heapq.heappush(self._timers, (visible_at, offset, token))
        return token

    def finish(self, offset: int) -> None:
        """The message at ``offset`` needs no more deliveries (acked, filtered, dead-lettered)."""
        self.inflight.pop(offset, None)
        self.parked.pop(offset, None)
        if offset >= self.committed:
            self.done.add(offset)
        while self.committed in self.done:
            self.done.discard(self.committed)
            self.committed += 1

    def skip_to(self, offset: int) -> None:
        """Mark everything below ``offset`` that was never handed out (nor parked) as finished."""
        for position in range(self.next_offset, offset):
            if position not in self.inflight and position not in self.parked:
                self.finish(position)
        self.next_offset = max(self.next_offset, offset)

    def blocked_groups(self) -> int:
        """FIFO message groups waiting: a message in flight with later ones of the same group
        held back behind it (for the metrics)."""
        if not self.parked:
            return 0
        waiting = set(self.parked.values())
        return len({e.message_group for e in self.inflight.values()} & waiting)

    def busy_groups(self, now: float) -> set[str]:
        """FIFO: message groups with a delivery still invisible (their later messages wait)."""
        return {e.message_group for e in self.inflight.values() if e.visible_at > now}

    def rehide_group(self, group: str, visible_at: float) -> None:
        """FIFO: hide every in-flight message of ``group`` until ``visible_at`` (new tokens), so
        the group's run comes back together, in order."""
        for offset, entry in self.inflight.items():
            if entry.message_group == group:
                entry.token = secrets.token_hex(6)
                entry.visible_at = visible_at
                heapq.heappush(self._timers, (visible_at, offset, entry.token))

    def expired(self, now: float) -> list[tuple[int, InFlight]]:
        """In-flight messages whose invisible time has passed, oldest first."""
        out: list[tuple[int, InFlight]] = []
        while self._timers and self._timers[0][0] <= now:
            _, offset, token = heapq.heappop(self._timers)
            entry = self.inflight.get(offset)
            if entry is not None and entry.token == token:
                out.append((offset, entry))
        return out

    def requeue(self, offset: int, entry: InFlight) -> None:
        """Put an expired entry back (it was not redelivered this time)."""
        heapq.heappush(self._timers, (entry.visible_at, offset, entry.token))

    def rehide(self, offset: int, visible_at: float) -> str:
        """Hide an in-flight message until ``visible_at`` with a new token, so the old receipt
        handle is stale (change-invisible-duration)."""
        entry = self.inflight[offset]
        entry.token = secrets.token_hex(6)
        entry.visible_at = visible_at
        heapq.heappush(self._timers, (visible_at, offset, entry.token))
        return entry.token

    def next_visible_at(self) -> float | None:
        """When the next in-flight message becomes visible again (discarding stale timers), so the
        broker sleeps until then instead of polling."""
        while self._timers:
            visible_at, offset, token = self._timers[0]
            entry = self.inflight.get(offset)
            if entry is not None and entry.token == token:
                return visible_at
            heapq.heappop(self._timers)
        return None

    def rebuild_timers(self) -> None:
        """Recreate the expiry heap from the in-flight entries (after loading ``pop.json``)."""
        self._timers = [(e.visible_at, o, e.token) for o, e in self.inflight.items()]
        heapq.heapify(self._timers)


class Handle(msgspec.Struct, frozen=True):
    """A receipt handle's contents: the queue, the offset and the token of one delivery, so an ack
    finds its entry and a stale one is recognised."""

    queue_id: int
    offset: int
    token: str

    def encode(self) -> str:
        """The handle as the text clients carry (``queue:offset:token``)."""
        return f"{self.queue_id}:{self.offset}:{self.token}"

    @classmethod
    def parse(cls, text: str) -> Handle:
        """A handle from a client's text; anything malformed is an
        :class:`InvalidReceiptHandleError`, never a crash."""
        try:
            queue, offset, token = text.split(":")
            return cls(int(queue), int(offset), token)
        except ValueError:
            raise InvalidReceiptHandleError(f"malformed receipt handle {text!r}") from None


class _Snapshot(msgspec.Struct):
    next_offset: int
    committed: int
    inflight: dict[int, InFlight]
    done: list[int]
    parked: dict[int, str] = {}


def _beyond(snap: _Snapshot, end: int) -> bool:
    """Whether a snapshot names an offset past a queue's end (never true of a real copy)."""
    offsets = [snap.committed, snap.next_offset, *snap.inflight, *snap.done, *snap.parked]
    return any(o > end for o in offsets)


def _snapshot_problem(snap: _Snapshot) -> str | None:
    offsets = [snap.committed, snap.next_offset, *snap.inflight, *snap.done, *snap.parked]
    return "negative offsets" if any(o < 0 for o in offsets) else None


class PopManager:
    """Every pop queue's state, loaded leniently from ``pop.json`` and snapshotted every
    ``state_persist_interval`` (module doc)."""

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "pop.json")
        self._queues: dict[tuple[str, str, int], PopQueue] = {}
        # Without an entry a queue restarts from its committed offset (offsets.json, which pop
        # acknowledgements also advance): what was in flight or acknowledged out of order above
        # it is delivered again.
        file = StateFile(
            self._path, dict, "pop consumers restart from their committed offsets (redelivered)"
        )
        for key, raw in file.mapping().items():
            parsed = parse_queue_key(key)
            if parsed is None:
                file.skip(f"entry {key[:200]!r}", "the key is not group@topic@queue", raw)
                continue
            snap = file.decode(raw, _Snapshot, f"entry {key!r}", _snapshot_problem)
            if snap is None:
                continue
            state = PopQueue(
                snap.next_offset, snap.committed, snap.inflight, set(snap.done), dict(snap.parked)
            )
            state.rebuild_timers()
            self._queues[parsed] = state
        file.finish()
        self.dirty = False

    def get(self, group: str, topic: str, queue_id: int) -> PopQueue | None:
        """The state of one (group, topic, queue), or None before its first pop."""
        return self._queues.get((group, topic, queue_id))

    def ensure(self, group: str, topic: str, queue_id: int, start: int) -> PopQueue:
        """The state of one (group, topic, queue), created at ``start`` (the committed offset) on
        its first pop."""
        key = (group, topic, queue_id)
        state = self._queues.get(key)
        if state is None:
            state = self._queues[key] = PopQueue(next_offset=start, committed=start)
        return state

    def replace(self, key: tuple[str, str, int], state: PopQueue) -> None:
        """Put ``state`` in place of a queue's state (an operator's reset: what was in flight
        is forgotten)."""
        self._queues[key] = state
        self.dirty = True

    def items(self) -> list[tuple[tuple[str, str, int], PopQueue]]:
        """A snapshot of every queue's state (expiry scans, status)."""
        return list(self._queues.items())

    def forget(self, *, group: str | None = None, topic: str | None = None) -> None:
        """Drop the state of a deleted group or topic."""
        for key in list(self._queues):
            if (group is None or key[0] == group) and (topic is None or key[1] == topic):
                del self._queues[key]
        self.dirty = True

    def lookup(self, group: str, topic: str, handle: Handle) -> tuple[PopQueue, InFlight]:
        """The queue state and in-flight entry a receipt handle names; an unknown or stale handle is
        an :class:`InvalidReceiptHandleError` saying which."""
        state = self._queues.get((group, topic, handle.queue_id))
        entry = state.inflight.get(handle.offset) if state else None
        if state is None or entry is None:
            raise InvalidReceiptHandleError(
                "receipt handle is unknown: the message was acknowledged or dead-lettered"
            )
        if entry.token != handle.token:
            raise InvalidReceiptHandleError(
                "receipt handle is stale: the message was delivered again since"
            )
        return state, entry

    def _snapshot(self) -> dict[str, _Snapshot]:
        return {
            f"{g}@{t}@{q}": _Snapshot(
                s.next_offset, s.committed, s.inflight, sorted(s.done), s.parked
            )
            for (g, t, q), s in self._queues.items()
        }

    def persist(self, force: bool = False, sink: Sink | None = None) -> None:
        """Save ``pop.json`` when something changed (or ``force``), or hand the bytes to ``sink`` to
        be written off the event loop."""
        if not (self.dirty or force):
            return
        self.dirty = False
        save_json(self._path, self._snapshot(), sink)

    def encode(self) -> bytes:
        """Every queue's state as pop.json holds it (a slave hands it back to its master)."""
        return msgspec.json.encode(self._snapshot())

    def merge(self, data: bytes, limit: Callable[[str, int], int] | None = None) -> list[str]:
        """Take the queues another copy of this state moved further (a slave that served pops
        while its master was away): its committed offset is beyond ours. Unreadable input
        changes nothing; a queue whose offsets pass ``limit(topic, queue)`` (its end here) is
        refused, and returned."""
        try:
            raw = msgspec.json.decode(data, type=dict[str, _Snapshot])
        except msgspec.MsgspecError:
            return []
        refused = []
        for key, snap in raw.items():
            parsed = parse_queue_key(key)
            if parsed is None or _snapshot_problem(snap) is not None:
                continue
            if limit is not None and _beyond(snap, limit(parsed[1], parsed[2])):
                refused.append(key)
                continue
            ours = self._queues.get(parsed)
            if ours is not None and ours.committed >= snap.committed:
                continue
            state = PopQueue(
                snap.next_offset, snap.committed, snap.inflight, set(snap.done), dict(snap.parked)
            )
            state.rebuild_timers()
            self._queues[parsed] = state
            self.dirty = True
        return refused

    def reload(self) -> None:
        """Read pop.json again (a slave promoted to master, or serving pops while its master is
        away, takes its master's last state)."""
        self._queues = PopManager(os.path.dirname(self._path))._queues
        self.dirty = False
