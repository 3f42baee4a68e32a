"""Delayed delivery: the 18 delay levels and arbitrary delivery times.

A delayed message is first stored in a schedule topic, with its real topic and queue in
properties and its due time (epoch ms) in the consume-queue tag slot. When it is due, a copy goes
to the real topic (same message id), and the schedule progress moves on.

- **Delay levels** (seed 000): one queue of ``%SYS%SCHEDULE`` per level. Within a level every
  message waits the same time, so due times only grow along the queue: the scheduler looks at
  each queue's head and sleeps until the earliest head is due. Progress is one offset per level.
- **Delivery timestamps** (5.x delay messages, and retry delays that are not a level): one queue
  of ``%SYS%TIMER`` in arrival order. Due times are in any order, so the scheduler keeps a heap
  of pending entries, rebuilt on start from the consume queue alone (the due times are in the tag
  slot: no record is read). Progress is "everything below offset N is delivered" plus the
  delivered offsets above N.

Wake-ups use the event loop's ``call_at`` for the earliest due time (not polling), so a 1 s delay
is delivered within a couple of milliseconds. Progress is persisted every second and on close;
after a crash, messages delivered since the last save are delivered again (at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from pocketmq import properties as props
from pocketmq.broker.persist import Sink, load_json, save_json
from pocketmq.errors import StoreError
from pocketmq.store import MessageStore, PutResult, StoredMessage, StoreMessage

__all__ = [
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "ScheduleService",
    "make_recall_handle",
    "parse_recall_handle",
]

log = logging.getLogger("pocketmq.broker")

SCHEDULE_TOPIC = "%SYS%SCHEDULE"
TIMER_TOPIC = "%SYS%TIMER"
_BATCH = 256

Append = Callable[[list[StoreMessage]], Awaitable[list[PutResult]]]


class _Progress(msgspec.Struct):
    levels: dict[int, int] = {}
    timer_floor: int = 0
    timer_done: list[int] = []
    recalled: list[int] = []  # physical offsets of held messages cancelled before they were due


def make_recall_handle(physical_offset: int, message_id: str) -> str:
    """An opaque-looking token naming one held (scheduled) message: where it is and its id."""
    return f"R1:{physical_offset}:{message_id}"


def parse_recall_handle(handle: str) -> tuple[int, str] | None:
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


class ScheduleService:
    def __init__(
        self,
        store: MessageStore,
        config_dir: str,
        levels: tuple[float, ...],
        append: Append,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._levels = levels
        self._append = append
        self._clock = clock
        self._path = os.path.join(config_dir, "schedule.json")
        progress = load_json(self._path, _Progress, _Progress())
        self._level_offsets: dict[int, int] = dict(progress.levels)
        self._timer = _Timer(progress.timer_floor, set(progress.timer_done))
        self._timer.scanned = progress.timer_floor
        self._recalled: set[int] = set(progress.recalled)
        self._releasing: set[int] = set()
        self._wake: asyncio.Event | None = None
        self._handle: asyncio.TimerHandle | None = None
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
        return self._levels[min(max(level, 1), len(self._levels)) - 1]

    def schedule_level(self, message: StoreMessage, level: int, now_ms: int) -> StoreMessage:
        """Turn ``message`` into its schedule-queue form for delay level ``level``."""
        level = min(max(level, 1), len(self._levels))
        due = now_ms + int(self.level_delay(level) * 1000)
        return self._hold(message, SCHEDULE_TOPIC, level - 1, due, {props.DELAY_LEVEL: str(level)})

    def schedule_at(self, message: StoreMessage, due_ms: int) -> StoreMessage:
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
            if record.queue_offset < self._level_offsets.get(record.queue_id + 1, 0):
                return False
        else:
            return False
        self._recalled.add(physical)
        self._dirty = True
        return True

    # -- the scheduler loop ---------------------------------------------------------------

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="schedule")

    async def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.persist(force=True)

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            try:
                next_due = await self._deliver_due()
            except Exception:
                log.exception("delivering scheduled messages failed; retrying in 1 s")
                next_due = int(self._clock() * 1000) + 1000
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            if next_due is not None:
                delay = max(0.0, next_due / 1000 - self._clock())
                self._handle = loop.call_at(loop.time() + delay, self._wake.set)
            await self._wake.wait()

    async def _deliver_due(self) -> int | None:
        """Deliver everything due now; return the earliest future due time (ms) or None."""
        now_ms = int(self._clock() * 1000)
        earliest: int | None = None
        for level in range(1, len(self._levels) + 1):
            due = await self._deliver_level(level, now_ms)
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        due = await self._deliver_timers(now_ms)
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
                await self._release([e.physical_offset for e in due_entries])
                offset = due_entries[-1].queue_offset + 1
                self._level_offsets[level] = offset
                self._dirty = True
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
        due: list[tuple[int, int]] = []
        while timer.heap and timer.heap[0][0] <= now_ms and len(due) < _BATCH * 4:
            due.append(heapq.heappop(timer.heap))
        if due:
            physical: list[int] = []
            try:
                for _, offset in due:
                    entries = self._store.read_queue(TIMER_TOPIC, 0, offset, 1)
                    if entries and entries[0].queue_offset == offset:
                        physical.append(entries[0].physical_offset)
                await self._release(physical)
            except BaseException:
                for item in due:  # not delivered: due again at the next run
                    heapq.heappush(timer.heap, item)
                raise
            for _, offset in due:
                timer.done.add(offset)
            while timer.floor in timer.done:
                timer.done.discard(timer.floor)
                timer.floor += 1
            self._dirty = True
        return timer.heap[0][0] if timer.heap else None

    async def _release(self, physical_offsets: list[int]) -> None:
        copies: list[StoreMessage] = []
        releasing: list[int] = []
        for physical in physical_offsets:
            if physical in self._recalled:  # cancelled by its producer: never delivered
                self._recalled.discard(physical)
                self._dirty = True
                continue
            record = self._store.read_message(physical)
            if record is None:
                log.error("scheduled message at %d is unreadable; skipped", physical)
                continue
            copies.append(self._restore(record))
            releasing.append(physical)
        if copies:
            self._releasing.update(releasing)  # too late to recall from here on
            try:
                results = await self._append(copies)
            finally:
                self._releasing.difference_update(releasing)
            refused = [r.status for r in results if not r.status.stored]
            if refused:
                # Keep the progress where it is: the run is retried and the held records are
                # released again (the copies that were stored come out twice: at least once).
                raise StoreError(
                    f"{len(refused)} of {len(copies)} due messages were not stored "
                    f"({refused[0].value}); they stay scheduled"
                )
            self.delivered += len(copies)

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
