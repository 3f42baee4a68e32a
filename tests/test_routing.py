"""Where a message group goes: the jump consistent hash (docs/semantics.md, "Ordered messages")."""

from __future__ import annotations

from pocketmq.routing import jump_hash, queue_for_group


def test_jump_hash_moves_few_keys_when_a_bucket_is_added() -> None:
    keys = range(10_000)
    before = [jump_hash(k * 7919 + 17, 10) for k in keys]
    after = [jump_hash(k * 7919 + 17, 11) for k in keys]
    moved = sum(b != a for b, a in zip(before, after, strict=True))
    assert 0.05 < moved / len(before) < 0.14  # about 1/11, not ~all as with modulo
    assert all(a == 10 for b, a in zip(before, after, strict=True) if b != a)
    assert sorted(set(before)) == list(range(10))


def test_group_to_queue_is_stable_across_processes() -> None:
    assert queue_for_group("order-42", 8) == queue_for_group("order-42", 8)
    spread = {queue_for_group(f"order-{n}", 8) for n in range(200)}
    assert spread == set(range(8))
    assert queue_for_group("order-42", 1) == 0
