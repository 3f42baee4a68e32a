"""The writer's two shapes of one append (docs/design.md, "The append path, two shapes"): a lone
message takes ``Writer._append_one``, a batch ``Writer._append``; both must answer and write
exactly what the other would, refusals, roll-overs and injected faults included. The batch of
one is the pure writer's; the lone shape the store's own (compiled when the build is there)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

from pocketmq.store import MessageStore, PutResult, StoreMessage, faults
from pocketmq.store import _writer as pure_writer
from pocketmq.store.faults import FaultRule

from .conftest import SMALL, store_files

T = TypeVar("T")

CONFIG = replace(  # SMALL's 16 KiB segments: a roll-over every dozen messages or so
    SMALL,
    consume_queue_entries_per_file=20,
    index_max_entries=40,
    max_message_size=3000,
    max_properties_size=200,
)


def _clock() -> float:
    return 1_700_000_000.0


def _pick(rng: random.Random, good: list[T], *bad: object) -> T:
    """One of ``good``, or now and then (4 %) one of ``bad`` (wrong-typed ones included: the
    compiled writer must refuse them as the pure one does)."""
    return rng.choice(bad) if rng.random() < 0.04 else rng.choice(good)  # type: ignore[return-value]


def _messages(seed: int, count: int) -> list[StoreMessage]:
    """Random messages, some of them refused (bad topic or queue id, a body or properties over
    their limit, a field out of range, a host of the wrong length)."""
    rng = random.Random(seed)
    messages = []
    for number in range(count):
        topic = _pick(rng, ["orders", "payments", "%RETRY%g"], "bad topic", 5)
        body: object = bytes(
            rng.randrange(256) for _ in range(_pick(rng, [0, 1, 200, 1500, 2900], 3100))
        )
        if rng.random() < 0.02:
            body = "a str body"
        props: dict[str, object] = {"UNIQ_KEY": f"M{seed}-{number}"}
        if rng.random() < 0.5:
            props["KEYS"] = " ".join(f"k{rng.randrange(9)}" for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.3:
            props["TAGS"] = rng.choice(["a", "b", ""])
        if rng.random() < 0.05:
            props["BIG"] = "x" * 300
        if rng.random() < 0.02:
            props["NUMBER"] = 1  # not a string: refused
        messages.append(
            StoreMessage(
                topic,
                _pick(rng, [0, 1, 2], -1),
                body,
                props,
                flags=_pick(rng, [0, 7], 2**32),
                born_timestamp=1_700_000_000_000 + number,
                born_host=_pick(rng, [b"", b"\x01" * 18], b"\x02" * 5, "::1"),
                reconsume_times=rng.choice([0, 3]),
                tag_code=_pick(rng, [None, None, 5], -1),
            )
        )
    return messages


def _answer(result: PutResult) -> tuple[object, ...]:
    return (
        result.status.name,
        result.reason,
        result.topic,
        result.queue_id,
        result.queue_offset,
        result.physical_offset,
        result.size,
        result.store_timestamp,
    )


class _BatchOfOne(pure_writer.Writer):
    """The pure writer, its lone messages sent through the batch shape (``_append`` with one
    message), the path every append took before the lone shape."""

    def _append_one(self, message, pinned, now_ms, segment):  # type: ignore[no-untyped-def]
        return self._append((message,), pinned, now_ms, segment)[0]


def _as_batch_of_one(store: MessageStore) -> None:
    store._writer = _BatchOfOne(store._state)


Faults = dict[int, FaultRule]  # armed just before the append of that number


def _run(
    directory: Path,
    messages: list[StoreMessage],
    sizes: list[int],
    shape: Callable[[MessageStore], None] | None,
    armed: Faults,
) -> tuple[list[tuple[object, ...]], list[object]]:
    """Append ``messages`` in appends of ``sizes`` (a fresh store, reopened half-way); ``shape``
    may rewire the writer; ``armed`` faults are armed before their append (and dropped before
    the store closes: they are the appends' faults, not the close's or the reopen's)."""
    answers: list[tuple[object, ...]] = []
    counters: list[object] = []
    start = 0
    cut = next(n for n in range(len(sizes) + 1) if sum(sizes[:n]) >= len(messages) // 2)
    for part in (sizes[:cut], sizes[cut:]):
        with MessageStore.open(str(directory), CONFIG, clock=_clock) as store:
            if shape is not None:
                shape(store)
            writer = store._writer
            injector = faults.FaultInjector()
            faults.install(injector)
            try:
                for size in part:
                    if start in armed:
                        injector.arm(armed[start])
                    results = store.append(messages[start : start + size])
                    answers += [_answer(r) for r in results]
                    start += size
            finally:
                faults.uninstall()
            counters.append(
                (
                    writer.messages_put,
                    writer.bytes_put,
                    writer.put_failures,
                    writer.index_broken,
                    injector.injected,
                )
            )
            if store._state.failure:
                break
    return answers, counters


def test_lone_appends_answer_and_write_what_batched_appends_do(tmp_path: Path) -> None:
    """The same messages one by one (the lone shape) and in batches of 2-9 (the batch shape):
    the same answers, refusals included, and the same bytes in every file (log, queues, index,
    checkpoint), across segment, queue-file and index-file roll-overs and a reopen."""
    messages = _messages(32, 400)
    rng = random.Random(7)
    sizes: list[int] = []
    for half in (200, 200):  # batches of 2-9 up to each half's end (the reopen)
        done = 0
        while done < half:
            size = min(rng.randint(2, 9), half - done)
            if half - done - size == 1:
                size += 1
            sizes.append(size)
            done += size
    lone, lone_counters = _run(tmp_path / "lone", messages, [1] * len(messages), None, {})
    batched, batched_counters = _run(tmp_path / "batched", messages, sizes, None, {})
    assert lone == batched
    statuses = {answer[0] for answer in lone}
    assert {"PUT_OK", "MESSAGE_ILLEGAL", "MESSAGE_TOO_LARGE", "PROPERTIES_TOO_LARGE"} <= statuses
    reasons = " ".join(str(answer[1]) for answer in lone)
    for wrong_type in ("topic 5 ", "body must be bytes", "born host", "cannot be stored"):
        assert wrong_type in reasons
    assert lone_counters == batched_counters
    files = store_files(tmp_path / "lone")
    assert files == store_files(tmp_path / "batched")
    assert sum(name.startswith("commitlog") for name in files) > 3  # segments rolled over
    assert sum(name.startswith("index") for name in files) > 2  # so did index files


FAULTS = {
    "log write EIO": FaultRule(op="write", target="commitlog", errno="EIO"),
    "log write ENOSPC": FaultRule(op="write", target="commitlog", errno="ENOSPC", count=3),
    "log write EINVAL": FaultRule(op="write", target="commitlog", errno="EINVAL", count=2),
    "segment allocate ENOSPC": FaultRule(op="allocate", target="commitlog", errno="ENOSPC"),
    "segment open EMFILE": FaultRule(op="open", target="commitlog", errno="EMFILE", count=2),
    "queue open EMFILE": FaultRule(op="open", target="consumequeue", errno="EMFILE", count=2),
    "queue allocate ENOSPC": FaultRule(op="allocate", target="consumequeue", errno="ENOSPC"),
    "queue write EIO": FaultRule(op="write", target="consumequeue", errno="EIO"),
    "index open EIO": FaultRule(op="open", target="index", errno="EIO"),
    "directory fsync EIO": FaultRule(op="fsync", target="directory", errno="EIO"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_lone_append_fails_as_a_batch_of_one_does(tmp_path: Path, fault: str) -> None:
    """Each fault armed at three points of a run of lone appends: the lone shape and a batch of
    one (the path before it) give the same answers, counters and files, whatever the fault
    refuses, loses or stops."""
    messages = _messages(5, 160)
    rule = FAULTS[fault]

    def armed() -> Faults:
        return {
            n: FaultRule(**{f: getattr(rule, f) for f in rule.__struct_fields__})
            for n in (9, 40, 120)
        }

    sizes = [1] * len(messages)
    lone = _run(tmp_path / "lone", messages, sizes, None, armed())
    one = _run(tmp_path / "one", messages, sizes, _as_batch_of_one, armed())
    assert lone == one
    assert sum(part[-1] for part in lone[1]) > 0  # type: ignore[index]  # faults were met
    assert store_files(tmp_path / "lone") == store_files(tmp_path / "one")
