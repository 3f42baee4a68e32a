"""Pure pieces of the broker: retry policies, filters, pop state, attempt records (the SDK's queue
allocation is tested in tests/client/consumer/test_rebalance.py)."""

from __future__ import annotations

import pytest

from pocketmq.broker import DEFAULT_DELAY_LEVELS, RetryPolicy
from pocketmq.broker.filtering import parse_tag_expression
from pocketmq.broker.pop import Handle, PopQueue
from pocketmq.errors import InvalidArgumentError, InvalidReceiptHandleError


def test_default_retry_delays_are_delay_levels_from_3_on() -> None:
    policy = RetryPolicy()
    delays = [policy.delay(n, DEFAULT_DELAY_LEVELS) for n in range(1, 17)]
    assert delays[:4] == [
        10,
        30,
        60,
        120,
    ]  # level 3 + reconsume times (docs/semantics.md, "Consumer retry")
    assert delays[-1] == 7200
    assert policy.max_attempts == 17
    assert policy.delay(40, DEFAULT_DELAY_LEVELS) == 7200  # clamped to the last level


def test_customized_and_exponential_policies() -> None:
    custom = RetryPolicy(max_retries=3, delays=(1, 5, 30))
    assert [custom.delay(n, DEFAULT_DELAY_LEVELS) for n in (1, 2, 3, 4)] == [1, 5, 30, 30]
    exponential = RetryPolicy(initial=5, multiplier=2, maximum=60)
    assert [exponential.delay(n, DEFAULT_DELAY_LEVELS) for n in (1, 2, 3, 4, 5)] == [
        5,
        10,
        20,
        40,
        60,
    ]


def test_tag_expressions() -> None:
    assert parse_tag_expression("*") is None
    assert parse_tag_expression("") is None
    assert parse_tag_expression("A || B ||C") == frozenset({"A", "B", "C"})
    with pytest.raises(InvalidArgumentError, match="SQL"):
        parse_tag_expression("a > 5")
    with pytest.raises(InvalidArgumentError):
        parse_tag_expression("A || ")


def test_pop_queue_commits_only_below_the_first_unfinished_offset() -> None:
    state = PopQueue(next_offset=0, committed=0)
    tokens = {n: state.hand_out(n, 1, 10.0, "c", 0.0) for n in range(5)}
    state.next_offset = 5
    state.finish(1)
    state.finish(2)
    assert state.committed == 0
    state.finish(0)
    assert state.committed == 3
    assert set(state.inflight) == {3, 4}
    assert tokens[3] != tokens[4]


def test_pop_queue_expiry_and_rehide() -> None:
    state = PopQueue(next_offset=0, committed=0)
    state.hand_out(0, 1, visible_at=5.0, consumer="c", now=0.0)
    state.hand_out(1, 1, visible_at=9.0, consumer="c", now=0.0)
    assert state.expired(4.9) == []
    [(offset, entry)] = state.expired(5.0)
    assert (offset, entry.attempt) == (0, 1)
    old = state.inflight[1].token
    new = state.rehide(1, visible_at=20.0)
    assert new != old
    assert state.expired(10.0) == []  # the old timer for offset 1 is stale
    assert state.next_visible_at() == 20.0


def test_receipt_handles_round_trip_and_reject_garbage() -> None:
    handle = Handle(3, 1200, "abcdef")
    assert Handle.parse(handle.encode()) == handle
    with pytest.raises(InvalidReceiptHandleError):
        Handle.parse("not-a-handle")


def test_attempt_records_written_before_message_group_still_decode() -> None:
    import msgspec

    from pocketmq.model import Attempt
    from pocketmq.protocol import decode_body

    old = msgspec.msgpack.encode(["id", "g", "t", 1, "c", "SUCCESS", "", 10, 20])
    assert msgspec.msgpack.decode(old, type=Attempt).message_group == ""
    assert decode_body(old, Attempt).message_group == ""
    new = msgspec.msgpack.encode(Attempt("id", "g", "t", 1, "c", "DLQ", "e", 10, 20, "acct-1"))
    assert decode_body(new, Attempt).message_group == "acct-1"  # same field order


def test_an_exponential_retry_that_never_gives_up_does_not_overflow() -> None:
    policy = RetryPolicy(max_retries=-1, initial=1.0, multiplier=2.0, maximum=600.0)
    assert policy.delay(5000, ()) == 600.0
