"""A pull at exactly a queue's last offset is answered from the message its append kept
(``Reader.appended``) instead of reading back and verifying the record just written: the
long poll that append wakes (docs/design.md, "One message's path"). The answer must be what a
read of the log gives — the same record, status and offsets — under tag filters, budgets, the
visible limit, and after every way the log or a queue is cut: a slave's cut and re-copy, a
topic's deletion, retention, reserved offsets, records set aside, a restart."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pocketmq.store import GetResult, GetStatus, MessageStore, StoreMessage
from pocketmq.store.record import pack_host

from .conftest import SMALL
from .test_pull_read import _damage, before_get_messages

_TAGS = ["a", "b", ""]


class _Counted:
    """The reader's commit log with its reads counted (a compiled ``CommitLog`` takes no
    instance attribute, so the method is not replaced on it)."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.reads = 0

    def read(self, offset: int, size: int) -> bytes | None:
        self.reads += 1
        return self._log.read(offset, size)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def _counted(store: MessageStore) -> _Counted:
    counted = _Counted(store._reader._commitlog)
    store._reader._commitlog = counted  # type: ignore[assignment]
    return counted


def _answer(got: GetResult) -> tuple[Any, ...]:
    return (got.status, got.messages, got.next_offset, got.min_offset, got.max_offset)


def _same_as_the_log(store: MessageStore, queue_id: int, offset: int, **budget: Any) -> GetResult:
    """``get_messages`` (from what the append kept, where it applies), checked against a read of
    the log (``test_pull_read.before_get_messages``, which never looks at it)."""
    got = store.get_messages("t", queue_id, offset, **budget)
    assert _answer(got) == _answer(
        before_get_messages(store._reader, "t", queue_id, offset, **budget)
    )
    return got


def _message(n: int, queue_id: int = 0, **fields: Any) -> StoreMessage:
    properties = {"UNIQ_KEY": f"M{n}", "TAGS": "a", "KEYS": f"k{n}"}
    return StoreMessage("t", queue_id, f"body {n}".encode() * 20, properties, **fields)


def test_a_pull_at_the_message_just_appended_does_not_read_the_log(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        counted = _counted(store)
        [put] = store.append([_message(0)])
        got = store.get_messages("t", 0, put.queue_offset)
        assert counted.reads == 0
        assert got.status is GetStatus.FOUND
        [record] = got.messages
        assert (record.queue_offset, record.physical_offset, record.size) == (0, 0, put.size)
        assert _answer(got) == _answer(before_get_messages(store._reader, "t", 0, 0))
        assert counted.reads == 1  # the check above read the log: the read it spared


def test_every_field_is_what_the_record_decodes_to(tmp_path: Path) -> None:
    """Born host given or not (the store's), a tag code of the schedule queues' kind, flags,
    reconsume counts, a prepared offset, no properties at all."""
    messages = [
        _message(1, flags=7, born_timestamp=123, reconsume_times=3),
        _message(2, born_host=pack_host("10.1.2.3:4567"), prepared_transaction_offset=99),
        _message(3, tag_code=1_800_000_000_123),
        StoreMessage("t", 0, b""),
    ]
    config = dataclasses.replace(SMALL, store_host="[::1]:10911")
    with MessageStore.open(str(tmp_path / "s"), config, clock=lambda: 1_700_000_000.5) as store:
        for n, message in enumerate(messages):
            store.append([message])
            got = _same_as_the_log(store, 0, n)
            assert got.messages[0].born_host in ("10.1.2.3:4567", "[::1]:10911")


def test_a_pull_of_a_batch_just_appended_does_not_read_the_log(tmp_path: Path) -> None:
    """The default producer's batches go to one queue: the pull their append wakes asks for
    the first of them, and gets them all (as many as its budgets take)."""
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        counted = _counted(store)
        store.append([_message(n) for n in range(5)])
        store.append([_message(n) for n in range(5, 9)])
        assert counted.reads == 0
        got = store.get_messages("t", 0, 5)
        assert [m.queue_offset for m in got.messages] == [5, 6, 7, 8]
        assert counted.reads == 0
        for budget in ({"max_count": 2}, {"max_scan": 3}, {"max_bytes": 400}, {"max_bytes": 1}):
            assert _same_as_the_log(store, 0, 6, **budget).messages
        assert store.get_messages("t", 0, 4).messages[0].queue_offset == 4  # an earlier append
        assert counted.reads


def test_joined_batches_of_several_queues(tmp_path: Path) -> None:
    """Several producers' requests in one append: each queue's run, and runs of one queue that
    other queues' messages interleave (read from the log)."""
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        counted = _counted(store)
        store.append([_message(n, queue_id=q) for n, q in enumerate([0, 0, 1, 1, 1, 2])])
        for queue_id, offset in [(0, 0), (0, 1), (1, 0), (1, 2), (2, 0)]:
            assert _answer(store.get_messages("t", queue_id, offset))[0] is GetStatus.FOUND
        assert counted.reads == 0
        store.append([_message(n, queue_id=q) for n, q in enumerate([0, 1, 0, 1])])
        for queue_id in range(2):
            _same_as_the_log(store, queue_id, 2)
            _same_as_the_log(store, queue_id, 3)


def test_a_batch_with_a_refused_message_is_read_from_the_log(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        refused = StoreMessage("t", 0, b"x", flags=-1)
        store.append([_message(0), refused, _message(1)])
        assert [m.queue_offset for m in _same_as_the_log(store, 0, 0).messages] == [0, 1]
        _same_as_the_log(store, 0, 1)


def test_a_filter_the_message_fails_reads_the_log_and_says_so(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.append([_message(0)])
        assert _same_as_the_log(store, 0, 0, tags=frozenset({"a"})).status is GetStatus.FOUND
        got = _same_as_the_log(store, 0, 0, tags=frozenset({"b"}))
        assert (got.status, got.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 1)
        store.append([_message(1, tag_code=5)])  # the entry's code is not the tag's
        assert _same_as_the_log(store, 0, 1, tags=frozenset({"a"})).messages == []


def test_a_record_past_the_visible_limit_is_not_answered(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        [put] = store.append([_message(0)])
        store.set_visible_limit(put.physical_offset + put.size - 1)
        got = _same_as_the_log(store, 0, 0)
        assert (got.status, got.messages) == (GetStatus.OFFSET_OVERFLOW_ONE, [])
        store.set_visible_limit(put.physical_offset + put.size)
        assert _same_as_the_log(store, 0, 0).status is GetStatus.FOUND


def test_budgets_that_take_nothing_read_the_log(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.append([_message(0)])
        for budget in ({"max_count": 0}, {"max_scan": 0}, {"max_bytes": 1}, {"max_bytes": 0}):
            _same_as_the_log(store, 0, 0, **budget)


def test_a_slave_s_cut_and_copy_again_answer_the_master_s_record(tmp_path: Path) -> None:
    """A broker demoted to slave: what it appended as master past the fork is cut, and its
    new master's record (the same queue offset, at the same log offset, of the same size)
    copied in; a pull there gets the master's record."""
    with MessageStore.open(str(tmp_path / "master"), SMALL) as master:
        master.append([_message(0)])
        master.append([StoreMessage("t", 0, b"M" * 200, {"UNIQ_KEY": "theirs"})])
        theirs = master.read_log(0, 1 << 20)
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.append([_message(0)])
        [ours] = store.append([StoreMessage("t", 0, b"O" * 200, {"UNIQ_KEY": "ours!!"})])
        assert store.get_messages("t", 0, 1).messages[0].body == b"O" * 200
        store.replica_of = "the group's master"
        store.cut_replica(ours.physical_offset, "diverged")
        assert _same_as_the_log(store, 0, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
        store.append_replica(ours.physical_offset, theirs[ours.physical_offset :])
        store.replica_of = ""
        got = _same_as_the_log(store, 0, 1)
        assert got.messages[0].body == b"M" * 200


def test_a_cut_on_a_store_that_appends_again_answers_the_new_record(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        [put] = store.append([_message(0)])
        store.get_messages("t", 0, 0)
        store.cut_replica(put.physical_offset, "diverged")
        assert _same_as_the_log(store, 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
        store.append([_message(9)])
        assert _same_as_the_log(store, 0, 0).messages[0].properties["UNIQ_KEY"] == "M9"


def test_a_deleted_topic_s_message_is_not_answered(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL) as store:
        store.append([_message(0)])
        store.delete_topic("t")
        assert _same_as_the_log(store, 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
        store.append([_message(5)])
        assert _same_as_the_log(store, 0, 0).messages[0].properties["UNIQ_KEY"] == "M5"


def test_reserved_offsets_and_retention_are_met_as_a_read_meets_them(tmp_path: Path) -> None:
    with MessageStore.open(str(tmp_path / "s"), SMALL, clock=lambda: 2_000_000_000.0) as store:
        store.append([_message(0)])
        store.reserve_queue_offset("t", 0, 3)
        for offset in range(4):
            _same_as_the_log(store, 0, offset)
        for n in range(60):  # several segments, then all but the newest expire
            store.append([_message(n, queue_id=1)])
        store.flush()
        assert store.run_maintenance(now=2_100_000_000.0).segments_deleted
        for offset in range(58, 61):
            _same_as_the_log(store, 1, offset)


def test_a_damaged_record_set_aside_by_a_read_is_not_answered_from_its_append(
    tmp_path: Path,
) -> None:
    """A record damaged after its append, found by a read from an earlier offset: set aside
    there, and the read of its own offset that follows meets it as a read of the log would.
    (A read of exactly that offset first is answered from the append: the record as written,
    what any read before the damage gave.)"""
    directory = tmp_path / "s"
    with MessageStore.open(str(directory), SMALL) as store:
        store.append([_message(0)])
        [put] = store.append([_message(1)])
        _damage(directory, put.physical_offset, 60)
        assert store.get_messages("t", 0, 0).next_offset == 2
        assert store.quarantined()
        got = _same_as_the_log(store, 0, 1)
        assert (got.status, got.messages) == (GetStatus.MESSAGE_WAS_REMOVING, [])


def test_a_restart_keeps_nothing(tmp_path: Path) -> None:
    directory = str(tmp_path / "s")
    with MessageStore.open(directory, SMALL) as store:
        store.append([_message(0)])
    with MessageStore.open(directory, SMALL) as store:
        counted = _counted(store)
        assert store.get_messages("t", 0, 0).status is GetStatus.FOUND
        assert counted.reads == 1


def test_what_is_kept_is_bounded(tmp_path: Path) -> None:
    """Appends spanning more than 256 KiB of log are read from the log; at most 64 queues are
    kept; an append whose first or last message was refused is not kept."""
    config = dataclasses.replace(SMALL, segment_size=1 << 20)
    with MessageStore.open(str(tmp_path / "s"), config) as store:
        appended = store._reader.appended
        store.append([StoreMessage("u", 0, b"x" * (128 * 1024))] * 2)
        _same_as_the_log(store, 0, 0)
        assert appended == {}
        for n in range(100):
            store.append([StoreMessage("t", n, b"x")])
            store.get_messages("t", n, 0)
        assert 0 < len(appended) <= 64
        store.append([StoreMessage("t", 0, b"x")])
        store.append([StoreMessage("t", 0, b"x"), StoreMessage("bad topic!", 0, b"x")])
        store.get_messages("t", 0, 0)
        _, results, _ = appended[("t", 0)]
        assert [r.queue_offset for r in results] == [1]  # the append before the last
        _same_as_the_log(store, 0, 1)
        _same_as_the_log(store, 0, 2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    steps=st.lists(
        st.sampled_from(
            ["append", "batch", "read", "limit", "unlimit", "delete", "cut", "reserve"]
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_reads_answer_what_the_log_does_whatever_happened_before(
    seed: int, steps: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rng = random.Random(seed)
    with MessageStore.open(str(tmp_path_factory.mktemp("s")), SMALL) as store:
        n = 0
        for step in steps:
            if step in ("append", "batch"):
                count = 1 if step == "append" else rng.randrange(2, 12)
                queue_id = rng.randrange(3)  # the default producer's batches: one queue
                batch = [
                    StoreMessage(
                        "t",
                        queue_id if rng.random() < 0.8 else rng.randrange(3),
                        b"x" * rng.randrange(2000),
                        {"UNIQ_KEY": f"M{n + i}", "TAGS": rng.choice(_TAGS)},
                        flags=-1 if rng.random() < 0.05 else 0,  # refused
                        tag_code=rng.choice([None, None, None, 7]),
                    )
                    for i in range(count)
                ]
                store.append(batch)
                n += count
            elif step == "limit":
                store.set_visible_limit(rng.randrange(store.write_position + 1))
            elif step == "unlimit":
                store.set_visible_limit(None)
            elif step == "delete":
                store.delete_topic("t")
            elif step == "cut" and store.write_position:
                store.cut_replica(rng.randrange(store.write_position), "diverged")
            elif step == "reserve":
                queue_id = rng.randrange(3)
                store.reserve_queue_offset("t", queue_id, store.max_offset("t", queue_id) + 2)
            for queue_id in range(3):  # every queue's last offsets
                last = store.max_offset("t", queue_id) - 1
                for offset in {last, last - 1, last - rng.randrange(12)}:
                    if offset >= 0:
                        _same_as_the_log(
                            store,
                            queue_id,
                            offset,
                            max_count=rng.choice([1, 2, 3, 32]),
                            max_bytes=rng.choice([1, 2000, 5000, 1 << 22]),
                            max_scan=rng.choice([1, 4, 1024]),
                            tags=rng.choice([None, None, frozenset({"a"}), frozenset({"", "b"})]),
                        )
