"""Due delayed messages survive a store that refuses their release (a full disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.broker import DEFAULT_DELAY_LEVELS
from pocketmq.broker.schedule import ScheduleService
from pocketmq.store import MessageStore, PutResult, PutStatus, StoreConfig, StoreMessage


class RefusingOnce:
    """The store's append, except that the first ``refusals`` calls answer DISK_FULL."""

    def __init__(self, store: MessageStore, refusals: int) -> None:
        self.store = store
        self.refusals = refusals

    async def __call__(self, messages: list[StoreMessage]) -> list[PutResult]:
        if self.refusals:
            self.refusals -= 1
            return [PutResult(status=PutStatus.DISK_FULL) for _ in messages]
        return self.store.append(messages)


def _message(i: int) -> StoreMessage:
    return StoreMessage(topic="orders", queue_id=0, body=f"m{i}".encode())


@pytest.mark.parametrize("path", ["level", "timestamp"])
async def test_a_refused_release_is_retried_not_lost(tmp_path: Path, path: str) -> None:
    now = [1_000.0]
    store = MessageStore.open(str(tmp_path / "store"), StoreConfig())
    append = RefusingOnce(store, refusals=1)
    schedule = ScheduleService(store, str(tmp_path), DEFAULT_DELAY_LEVELS, append, lambda: now[0])
    now_ms = int(now[0] * 1000)
    held = [
        schedule.schedule_level(_message(i), 1, now_ms)
        if path == "level"
        else schedule.schedule_at(_message(i), now_ms + 1000)
        for i in range(3)
    ]
    assert all(r.status.stored for r in store.append(held))
    now[0] += DEFAULT_DELAY_LEVELS[0] + 1

    retry_at = await schedule._deliver_due()  # refused for now: asked again in a second
    assert retry_at == int(now[0] * 1000) + 1000
    assert store.max_offset("orders", 0) == 0

    now[0] += 1
    await schedule._deliver_due()  # a second later the disk has room again
    bodies = [store.read_message(e.physical_offset) for e in store.read_queue("orders", 0, 0, 10)]
    assert [m.body for m in bodies if m is not None] == [b"m0", b"m1", b"m2"]
    assert await schedule._deliver_due() is None  # nothing left, nothing twice
    assert store.max_offset("orders", 0) == 3
    store.close()
