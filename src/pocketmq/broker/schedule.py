"""Delayed delivery: the 18 delay levels and arbitrary delivery times.

A delayed message is first stored in a schedule topic, with its real topic and queue in
properties and its due time (epoch ms) in the consume-queue tag slot. When it is due, a copy goes
to the real topic (same message id), and the schedule progress moves on.

- **Delay levels** (docs/semantics.md, "Consumer retry, delays and dead letters"): one queue of
  ``%SYS%SCHEDULE`` per level. Within a level every message waits the same time, so due times
  only grow along the queue: the scheduler looks at each queue's head and sleeps until the
  earliest head is due. Progress is one offset per level.
- **Delivery timestamps** (5.x delay messages, and retry delays that are not a level): one queue
  of ``%SYS%TIMER`` in arrival order. Due times are in any order, so the scheduler keeps a heap
  of pending entries, rebuilt on start from the consume queue alone (the due times are in the tag
  slot: no record is read). Progress is "everything below offset N is delivered" plus the
  delivered offsets above N.

Wake-ups use the event loop's timers for the earliest due time (not polling), so a 1 s delay is
delivered within a couple of milliseconds. Due times are wall-clock times (they are in the log,
and a restart must honour them), but the event loop sleeps on the monotonic clock: a sleep is
therefore never longer than ``MAX_SLEEP`` (1 s), and every wake-up reads the wall clock again.
A step of the wall clock (NTP, an operator's ``date -s``) then delays nothing by more than a
second once the clock is right (docs/operations.md, "When the wall clock steps"); a sleep sized
to a due time an hour away under a stepped-back clock used to hold every delayed message for that
hour. Progress is persisted every second and on close; after a crash, messages delivered since
the last save are delivered again (at-least-once).

One message never holds up the others (docs/semantics.md, "a due message the store refuses"):

- The store refuses a copy **for good** (``MESSAGE_ILLEGAL``, too large: e.g. the retry topic of
  a group created before names were checked is longer than the store's 127 characters). The
  message is *isolated*: a retry goes to its group's dead-letter topic when that one is storable,
  anything else is *parked* — one log line, the ``schedule_parked`` counter and an entry in
  ``schedule.json`` — and the schedule moves past it. The progress that passes it and the parked
  entry are saved in the same atomic write of ``schedule.json``, so after a restart it is either
  retried once more (and isolated again) or skipped; never re-stalled.
- The store refuses **for now** (disk full, I/O error, busy): the message stays due and is
  retried every second, with one rate-limited log line. Its level's saved progress cannot pass
  it (what the level released alongside is remembered and not released twice); the other levels
  and the timer go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Protocol

import msgspec

from pocketmq import properties as props
from pocketmq.broker.persist import Sink, save_json
from pocketmq.broker.statefile import StateFile
from pocketmq.names import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    is_storable_topic,
)
from pocketmq.store import MessageStore, PutResult, PutStatus, StoredMessage, StoreMessage

__all__ = [
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "ParkedMessage",
    "ScheduleService",
    "make_recall_handle",
    "parse_recall_handle",
]

log = logging.getLogger("pocketmq.broker")

_BATCH = 256
_RETRY_MS = 1000  # a message the store refused for now is asked again after this long
_PARKED_KEPT = 1000  # parked messages listed in schedule.json (the counter counts them all)
_TROUBLE_LOG_INTERVAL = 60.0  # seconds between two log lines about the same ongoing trouble
MAX_SLEEP = 1.0
"""The longest the scheduler sleeps before it reads the wall clock again (module docstring)."""
# refusals that will not pass by retrying: the copy itself is unstorable
_FOR_GOOD = frozenset(
    {PutStatus.MESSAGE_ILLEGAL, PutStatus.MESSAGE_TOO_LARGE, PutStatus.PROPERTIES_TOO_LARGE}
)

Append = Callable[[list[StoreMessage]], Awaitable[list[PutResult]]]


class Cancellable(Protocol):
    """What a timer returns (``asyncio.TimerHandle``): something to cancel."""

    def cancel(self) -> None:
        """Do not run the callback."""


#: Run a callback after so many seconds of the monotonic clock (``loop.call_later``).
CallLater = Callable[[float, Callable[[], None]], Cancellable]
#: Store a copy of a message in a group's dead-letter topic; True when it was stored.
DeadLetter = Callable[[str, StoredMessage, str], bool]

_NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class ParkedMessage(msgspec.Struct, frozen=True):
    """A due message the store refused for good and no dead-letter topic could take. It stays
    where it was held (find it with ``pocketmq message show <id>``) until retention removes it."""

    physical_offset: int
    message_id: str
    topic: str  # where it was due
    reason: str
    at_ms: int


class _Progress(msgspec.Struct):
    levels: dict[int, int] = {}
    timer_floor: int = 0
    timer_done: list[int] = []
    recalled: list[int] = []  # physical offsets of held messages cancelled before they were due
    parked: list[ParkedMessage] = []


def make_recall_handle(physical_offset: int, message_id: str) -> str:
    """An opaque-looking token naming one held (scheduled) message: where it is and its id."""
    return f"R1:{physical_offset}:{message_id}"


def parse_recall_handle(handle: str) -> tuple[int, str] | None:
    """The physical offset and message id of a recall handle, or None for anything that is not one
    (the caller answers NOT_FOUND)."""
    parts = handle.split(":")
    if len(parts) != 3 or parts[0] != "R1" or not parts[1].isdigit() or not parts[2]:
        return None
    return int(parts[1]), parts[2]


@dataclass(slots=True)
class _Timer:
    floor: int = 0
    done: set[int] = field(default_factory=set)
    heap: list[tuple[int, int]] = field(default_factory=list)  # (due ms, offset)
    scanned: int = 0  # consume-queue entries already pushed onto the heap
    # after the store refused a release for now: nothing is popped before this wall-clock ms
    retry_at: int = 0


class ScheduleService:
    """Holds delayed messages and releases each to its real topic when due (module docstring).

    ``counters`` receives ``schedule_parked``, ``schedule_dead_lettered`` and
    ``schedule_release_refused`` (the broker's status counters); ``dead_letter`` stores a due
    retry that can never reach its retry topic in its group's DLQ instead of parking it.
    ``clock`` is the wall clock the due times follow; ``call_later`` the monotonic timer the
    scheduler sleeps on (the event loop's; tests pass a fake one to step the two apart).
    """

    def __init__(
        self,
        store: MessageStore,
        config_dir: str,
        levels: tuple[float, ...],
        append: Append,
        clock: Callable[[], float],
        *,
        counters: Counter[str] | None = None,
        dead_letter: DeadLetter | None = None,
        call_later: CallLater | None = None,
    ) -> None:
        self._store = store
        self._levels = levels
        self._append = append
        self._clock = clock
        self._counters: Counter[str] = counters if counters is not None else Counter()
        self._dead_letter = dead_letter
        self._path = os.path.join(config_dir, "schedule.json")
        progress = _load_progress(self._path)
        self._level_offsets: dict[int, int] = dict(progress.levels)
        self._timer = _Timer(progress.timer_floor, set(progress.timer_done))
        self._timer.scanned = progress.timer_floor
        self._recalled: set[int] = set(progress.recalled)
        self._parked: list[ParkedMessage] = list(progress.parked)
        self._releasing: set[int] = set()
        # per level: queue offsets above its progress already released (see _deliver_level)
        self._level_released: dict[int, set[int]] = {}
        self._trouble_logged: dict[str, float] = {}
        self._wake: asyncio.Event | None = None
        self._call_later = call_later
        self._handle: Cancellable | None = None
        self._task: asyncio.Task[None] | None = None
        self._dirty = False
        self.delivered = 0

    # -- scheduling -----------------------------------------------------------------------

    def level_for(self, delay: float) -> int | None:
        """The level whose delay is exactly ``delay`` seconds, if any (1-based)."""
        for number, seconds in enumerate(self._levels, start=1):
            if abs(seconds - delay) < 1e-9:
                return number
        return None

    def level_delay(self, level: int) -> float:
        """The delay of a 4.x delay level (levels outside 1..18 are clamped)."""
        return self._levels[min(max(level, 1), len(self._levels)) - 1]

    def schedule_level(self, message: StoreMessage, level: int, now_ms: int) -> StoreMessage:
        """Turn ``message`` into its schedule-queue form for delay level ``level``."""
        level = min(max(level, 1), len(self._levels))
        due = now_ms + int(self.level_delay(level) * 1000)
        return self._hold(message, SCHEDULE_TOPIC, level - 1, due, {props.DELAY_LEVEL: str(level)})

    def schedule_at(self, message: StoreMessage, due_ms: int) -> StoreMessage:
        """The record that holds ``message`` in the timer topic until ``due_ms`` (a 5.x delivery
        time, or a retry delay that is not a level)."""
        return self._hold(message, TIMER_TOPIC, 0, due_ms, {props.DELIVER_TIME_MS: str(due_ms)})

    @staticmethod
    def _hold(
        message: StoreMessage, topic: str, queue_id: int, due: int, extra: dict[str, str]
    ) -> StoreMessage:
        properties = dict(message.properties)
        properties[props.REAL_TOPIC] = message.topic
        properties[props.REAL_QUEUE_ID] = str(message.queue_id)
        properties.update(extra)
        return msgspec.structs.replace(
            message, topic=topic, queue_id=queue_id, properties=properties, tag_code=due
        )

    def notify(self) -> None:
        """Something was scheduled: re-evaluate the next wake-up."""
        if self._wake is not None:
            self._wake.set()

    def cancel(self, record: StoredMessage) -> bool:
        """Recall a held message so it is never delivered; False when it was already
        delivered (or is being delivered right now), or was recalled before."""
        physical = record.physical_offset
        if physical in self._recalled or physical in self._releasing:
            return False
        if record.topic == TIMER_TOPIC:
            timer = self._timer
            if record.queue_offset < timer.floor or record.queue_offset in timer.done:
                return False
        elif record.topic == SCHEDULE_TOPIC:
            level = record.queue_id + 1
            if record.queue_offset < self._level_offsets.get(level, 0):
                return False
            if record.queue_offset in self._level_released.get(level, ()):
                return False
        else:
            return False
        self._recalled.add(physical)
        self._dirty = True
        return True

    # -- the scheduler loop ---------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler task (after the broker's recovery)."""
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="schedule")

    async def close(self) -> None:
        """Stop the scheduler and save its progress, so a restart neither loses nor repeats released
        messages."""
        if self._handle is not None:
            self._handle.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.persist(force=True)

    async def _run(self) -> None:
        assert self._wake is not None
        call_later = self._call_later or asyncio.get_running_loop().call_later
        while True:
            self._wake.clear()
            try:
                next_due = await self._deliver_due()
            except Exception as exc:  # a bug: _deliver_due isolates what it knows of
                self._trouble("scheduler", "delivering scheduled messages failed", exc)
                next_due = int(self._clock() * 1000) + _RETRY_MS
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            if next_due is not None:
                # bounded: the wall clock may step while we sleep on the monotonic one
                delay = min(MAX_SLEEP, max(0.0, next_due / 1000 - self._clock()))
                self._handle = call_later(delay, self._wake.set)
            await self._wake.wait()

    async def _deliver_due(self) -> int | None:
        """Deliver everything due now; return when to look again (ms), or None when nothing is
        scheduled. Each level and the timer are delivered independently: trouble in one of
        them (even an unexpected exception) never keeps the others from being delivered."""
        now_ms = int(self._clock() * 1000)
        earliest: int | None = None
        sources: list[tuple[str, Callable[[int], Awaitable[int | None]]]] = [
            (f"delay level {level}", functools.partial(self._deliver_level, level))
            for level in range(1, len(self._levels) + 1)
        ]
        sources.append(("delivery-time timer", self._deliver_timers))
        for name, deliver in sources:
            try:
                due = await deliver(now_ms)
            except Exception as exc:
                self._trouble(name, f"delivering {name} failed; retrying every second", exc)
                due = now_ms + _RETRY_MS
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        return earliest

    async def _deliver_level(self, level: int, now_ms: int) -> int | None:
        queue_id = level - 1
        offset = max(
            self._level_offsets.get(level, 0), self._store.min_offset(SCHEDULE_TOPIC, queue_id)
        )
        while True:
            entries = self._store.read_queue(SCHEDULE_TOPIC, queue_id, offset, _BATCH)
            if not entries:
                return None
            due_entries = []
            for entry in entries:
                if entry.tag_code > now_ms:
                    break
                due_entries.append(entry)
            if due_entries:
                # A level's progress is one offset: it passes the finished prefix only. What was
                # released behind a message refused for now is remembered (in memory: after a
                # crash it is released again) so the next try does not release it twice.
                released = self._level_released.setdefault(level, set())
                todo = [e for e in due_entries if e.queue_offset not in released]
                finished = await self._release([e.physical_offset for e in todo])
                released.update(e.queue_offset for e, ok in zip(todo, finished, strict=True) if ok)
                passed = 0
                while passed < len(due_entries) and due_entries[passed].queue_offset in released:
                    released.discard(due_entries[passed].queue_offset)
                    passed += 1
                if passed:
                    offset = due_entries[passed - 1].queue_offset + 1
                    self._level_offsets[level] = offset
                    self._dirty = True
                if passed < len(due_entries):
                    return now_ms + _RETRY_MS  # refused for now: it keeps its place in line
            if len(due_entries) < len(entries):
                return entries[len(due_entries)].tag_code

    async def _deliver_timers(self, now_ms: int) -> int | None:
        timer = self._timer
        # pick up entries appended since the last look
        while True:
            entries = self._store.read_queue(TIMER_TOPIC, 0, timer.scanned, 4096)
            if not entries:
                break
            for entry in entries:
                if entry.queue_offset not in timer.done:
                    heapq.heappush(timer.heap, (entry.tag_code, entry.queue_offset))
            timer.scanned = entries[-1].queue_offset + 1
        if not now_ms < timer.retry_at <= now_ms + _RETRY_MS:
            # passed, or the wall clock stepped back behind it: never wait more than the retry
            # interval from now (docs/operations.md, "When the wall clock steps")
            timer.retry_at = 0
        due: list[tuple[int, int]] = []
        while (
            not timer.retry_at
            and timer.heap
            and timer.heap[0][0] <= now_ms
            and len(due) < _BATCH * 4
        ):
            due.append(heapq.heappop(timer.heap))
        if due:
            physical: list[int] = []
            located: list[tuple[int, int]] = []
            try:
                for item in due:
                    entries = self._store.read_queue(TIMER_TOPIC, 0, item[1], 1)
                    if entries and entries[0].queue_offset == item[1]:
                        physical.append(entries[0].physical_offset)
                        located.append(item)
                    else:  # removed by retention: nothing left to deliver
                        timer.done.add(item[1])
                finished = await self._release(physical)
            except BaseException:
                for item in due:  # not delivered: due again at the next run
                    if item[1] not in timer.done:
                        heapq.heappush(timer.heap, item)
                raise
            for item, ok in zip(located, finished, strict=True):
                if ok:
                    timer.done.add(item[1])
                else:  # refused for now: asked again in a second, with its own due time
                    heapq.heappush(timer.heap, item)
                    timer.retry_at = now_ms + _RETRY_MS
            while timer.floor in timer.done:
                timer.done.discard(timer.floor)
                timer.floor += 1
            self._dirty = True
        if not timer.heap:
            return None
        return max(timer.heap[0][0], timer.retry_at)

    async def _release(self, physical_offsets: list[int]) -> list[bool]:
        """Copy the held messages at ``physical_offsets`` to their real topics. Returns, per
        message, whether it is finished with: delivered, recalled, gone, dead-lettered or
        parked. False means the store refused it for now; it must be released again later."""
        finished = [False] * len(physical_offsets)
        copies: list[StoreMessage] = []
        held: list[tuple[int, StoredMessage]] = []  # (slot, record) per copy
        for slot, physical in enumerate(physical_offsets):
            if physical in self._recalled:  # cancelled by its producer: never delivered
                self._recalled.discard(physical)
                self._dirty = True
                finished[slot] = True
                continue
            record = self._store.read_message(physical)
            if record is None:
                log.error("scheduled message at %d is unreadable; skipped", physical)
                finished[slot] = True
                continue
            try:
                copy = self._restore(record)
            except ValueError as exc:
                finished[slot] = self._isolate(record, None, f"its schedule properties: {exc}")
                continue
            copies.append(copy)
            held.append((slot, record))
        if not copies:
            return finished
        releasing = [record.physical_offset for _, record in held]
        self._releasing.update(releasing)  # too late to recall from here on
        try:
            results = await self._append(copies)
        finally:
            self._releasing.difference_update(releasing)
        refused_for_now: list[PutResult] = []
        for (slot, record), copy, result in zip(held, copies, results, strict=True):
            if result.status.stored:
                finished[slot] = True
                self.delivered += 1
            elif result.status in _FOR_GOOD:
                reason = f"{result.status.value}: {result.reason or 'refused by the store'}"
                finished[slot] = self._isolate(record, copy, reason)
            else:
                refused_for_now.append(result)
        if refused_for_now:
            first = refused_for_now[0]
            self._counters["schedule_release_refused"] += len(refused_for_now)
            self._trouble(
                f"refused:{first.status.value}",
                f"{len(refused_for_now)} due message(s) were not stored "
                f"({first.status.value}: {first.reason or '-'}); they stay scheduled and are "
                "retried every second",
            )
        return finished

    def _isolate(self, record: StoredMessage, copy: StoreMessage | None, reason: str) -> bool:
        """A due message that can never be stored where it is due: dead-letter a retry when its
        group's DLQ can hold it, park anything else. False when the dead letter was refused for
        now (the message stays due and comes back here on the next try)."""
        if copy is not None and copy.topic.startswith(RETRY_PREFIX) and self._dead_letter:
            group = copy.topic[len(RETRY_PREFIX) :]
            if is_storable_topic(DLQ_PREFIX + group):
                letter = msgspec.structs.replace(
                    record, topic=copy.topic, queue_id=copy.queue_id, properties=copy.properties
                )
                # the dead letter logs its one line, with this reason, and records the attempt
                if not self._dead_letter(group, letter, f"its retry cannot be stored ({reason})"):
                    return False
                self._counters["schedule_dead_lettered"] += 1
                return True
        topic = copy.topic if copy is not None else record.properties.get(props.REAL_TOPIC, "?")
        self._parked.append(
            ParkedMessage(
                record.physical_offset,
                record.message_id,
                topic,
                reason,
                int(self._clock() * 1000),
            )
        )
        del self._parked[:-_PARKED_KEPT]
        self._counters["schedule_parked"] += 1
        self._dirty = True
        log.warning(
            "scheduled message %s for %s can never be delivered (%s); parked: it stays in the "
            "log at offset %d (`pocketmq message show %s`), listed in schedule.json",
            record.message_id,
            topic[:40] + ("..." if len(topic) > 40 else ""),
            reason,
            record.physical_offset,
            record.message_id,
        )
        return True

    def _trouble(self, key: str, text: str, exc: Exception | None = None) -> None:
        """Log ongoing trouble once per minute per ``key``, not once per retry (an unexpected
        exception with its traceback: it is a bug)."""
        now = self._clock()
        last = self._trouble_logged.get(key)
        if last is not None and 0 <= now - last < _TROUBLE_LOG_INTERVAL:  # < 0: a clock step
            return
        self._trouble_logged[key] = now
        log.warning("%s", text, exc_info=exc)

    def parked(self) -> list[ParkedMessage]:
        """The most recently parked messages (at most 1000), oldest first."""
        return list(self._parked)

    @staticmethod
    def _restore(record: StoredMessage) -> StoreMessage:
        properties = dict(record.properties)
        topic = properties.pop(props.REAL_TOPIC, record.topic)
        queue_id = int(properties.pop(props.REAL_QUEUE_ID, "0"))
        properties.pop(props.DELAY_LEVEL, None)
        properties.pop(props.DELIVER_TIME_MS, None)
        return StoreMessage(
            topic=topic,
            queue_id=queue_id,
            body=record.body,
            properties=properties,
            flags=record.flags,
            born_timestamp=record.born_timestamp,
            reconsume_times=record.reconsume_times,
        )

    # -- persistence ----------------------------------------------------------------------

    def persist(self, force: bool = False, sink: Sink | None = None) -> None:
        """Save ``schedule.json`` (level offsets, timer progress, recalls, parked messages) when
        something changed, or hand the bytes to ``sink``."""
        if not (self._dirty or force):
            return
        self._dirty = False
        save_json(
            self._path,
            _Progress(
                levels=dict(self._level_offsets),
                timer_floor=self._timer.floor,
                timer_done=sorted(self._timer.done),
                recalled=sorted(self._recalled),
                parked=list(self._parked),
            ),
            sink,
        )

    def consumed_positions(self) -> dict[tuple[str, int], int]:
        """How far each schedule queue was delivered (see Broker startup)."""
        positions = {(SCHEDULE_TOPIC, level - 1): o for level, o in self._level_offsets.items()}
        done = max(self._timer.done, default=-1) + 1
        positions[(TIMER_TOPIC, 0)] = max(self._timer.floor, done)
        return positions

    def pending(self) -> dict[str, int]:
        """How many messages wait per level and on the timer (for status)."""
        out: dict[str, int] = {}
        for level in range(1, len(self._levels) + 1):
            waiting = self._store.max_offset(SCHEDULE_TOPIC, level - 1) - self._level_offsets.get(
                level, 0
            )
            if waiting > 0:
                out[f"level_{level}"] = waiting
        out["timer"] = len(self._timer.heap)
        return out


def _load_progress(path: str) -> _Progress:
    """schedule.json, field by field and entry by entry (a bad entry is skipped alone).

    What a loss costs errs towards delivering again: a level whose offset is lost starts at its
    oldest held message, a lost timer floor at the timer's oldest entry (due messages are
    delivered again, same message id), a lost recall lets that message be delivered after all.
    """
    state = StateFile(
        path,
        dict,
        "held messages still in the log are delivered (again) when due, recalls are forgotten",
    )
    progress = _Progress()
    for key, raw in state.mapping().items():
        if key == "levels":
            levels: dict[str, msgspec.Raw] = (
                state.decode(raw, dict[str, msgspec.Raw], "levels") or {}
            )
            for level, offset_raw in levels.items():
                if not level.isdigit() or not 1 <= int(level) <= 1000:
                    state.skip(f"levels[{level!r}]", "not a delay level number", offset_raw)
                    continue
                offset = state.decode(offset_raw, _NonNegative, f"levels[{level}]")
                if offset is not None:
                    progress.levels[int(level)] = offset
        elif key == "timer_floor":
            progress.timer_floor = state.decode(raw, _NonNegative, key) or 0
        elif key == "timer_done":
            progress.timer_done = state.decode_list(raw, _NonNegative, key)
        elif key == "recalled":
            progress.recalled = state.decode_list(raw, _NonNegative, key)
        elif key == "parked":
            progress.parked = state.decode_list(raw, ParkedMessage, key)
        else:
            state.skip(f"field {key!r}", "unknown field", raw)
    state.finish()
    return progress
