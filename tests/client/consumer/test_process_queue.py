"""The process queue's commit offset is always the smallest offset it still holds, whatever order
messages finish in, also after an operator moved the queue back; finding it does not scan what
is held, and what it remembers to find it stays bounded behind a stuck first message."""

from __future__ import annotations

import random

from pocketmq.client.consumer.hotpath import ProcessQueue
from pocketmq.protocol import structs as w


def _messages(offsets: range | list[int]) -> list[w.Delivered]:
    return [w.Delivered("T", 0, n, b"", {}, 0, 0, n) for n in offsets]


def _queue() -> ProcessQueue:
    pq = ProcessQueue(key=("b", "T", 0), address="a:1", expression="*")
    pq.next_offset = 0
    return pq


def test_the_commit_offset_is_the_smallest_offset_held_in_any_finishing_order() -> None:
    rng = random.Random(7)
    pq = _queue()
    pulled = 0
    held: set[int] = set()
    for _ in range(200):
        if rng.random() < 0.4:  # a pull of up to 32, with gaps (messages filtered by tag)
            offsets = sorted(rng.sample(range(pulled, pulled + 48), rng.randint(1, 32)))
            assert [m.queue_offset for m in pq.add(_messages(offsets))] == offsets
            held.update(offsets)
            pulled += 48
            pq.next_offset = pulled
        elif held:
            done = rng.sample(sorted(held), rng.randint(1, len(held)))
            pq.remove(done)
            held.difference_update(done)
        assert pq.commit_offset() == (min(held) if held else pq.next_offset)


def test_a_queue_moved_back_still_commits_its_smallest_offset() -> None:
    pq = _queue()
    pq.add(_messages(range(100, 110)))
    pq.remove([100, 101])
    assert pq.commit_offset() == 102
    pq.add(_messages([5, 6]))  # an operator reset the group: lower offsets arrive later
    assert pq.commit_offset() == 5
    pq.remove([5, 6, *range(102, 110)])
    assert pq.commit_offset() == pq.next_offset
    pq.add(_messages([7, 8]))  # empty again: back to the cheap way
    pq.remove([7])
    assert pq.commit_offset() == 8


def test_finished_offsets_behind_a_stuck_first_message_are_not_kept() -> None:
    pq = _queue()
    pq.add(_messages([0]))  # never finishes
    for start in range(1, 100_001, 32):
        pq.add(_messages(range(start, start + 32)))
        pq.remove(list(range(start, start + 32)))
        assert pq.commit_offset() == 0
    assert pq.messages.keys() == {0}
    assert len(pq._order or ()) <= 2 * len(pq.messages) + 64 + 32


def test_the_bytes_held_are_the_bodies_held_whatever_is_added_twice_or_removed_twice() -> None:
    """What the pull loop's byte bound reads (``max_cached_bytes_per_queue``): bodies only,
    each counted once however often it is pulled or finished."""
    rng = random.Random(3)
    pq = _queue()
    bodies = {n: rng.randbytes(rng.randint(0, 300)) for n in range(400)}
    held: set[int] = set()
    for _ in range(300):
        choice = rng.random()
        if choice < 0.45:
            offsets = rng.sample(range(400), rng.randint(1, 40))
            pq.add([w.Delivered("T", 0, n, bodies[n], {"k": "v" * n}, 0, 0, n) for n in offsets])
            held.update(offsets)
        else:
            done = rng.sample(range(400), rng.randint(1, 60))  # some never held, some twice
            pq.space.clear()
            pq.remove(done)
            assert pq.space.is_set()  # a waiting pull loop looks at the bounds again
            held.difference_update(done)
        assert pq.held_bytes == sum(len(bodies[n]) for n in held)
    pq.remove(list(range(400)))
    assert pq.held_bytes == 0


def test_an_offset_twice_in_one_answer_is_held_handed_on_and_counted_once() -> None:
    """A peer that repeats an offset in one pull answer must not leave bytes counted that no
    finish takes back: the byte bound would then stop the queue's pulls for good."""
    pq = _queue()
    twice = w.Delivered("T", 0, 5, b"x" * 100, {}, 0, 0, 5)
    fresh = pq.add([twice, twice])
    assert [m.queue_offset for m in fresh] == [5]
    assert pq.held_bytes == 100
    pq.remove([5])
    assert (pq.held_bytes, pq.messages) == (0, {})


def test_a_pull_becomes_the_work_queues_batches_in_order() -> None:
    pq = _queue()
    pulled = _messages(range(7))
    assert pq.batches(pulled, 1) == [(pq, [m]) for m in pulled]
    assert [[m.queue_offset for m in batch] for q, batch in pq.batches(pulled, 3) if q is pq] == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]
    assert pq.batches([], 1) == []
