"""``PushConsumerConfig`` refuses, at construction and by name, a setting that would make a
consumer spin or silently never consume (docs/semantics.md, "A push consumer ... stops pulling
a queue")."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pocketmq.client.consumer.config import PushConsumerConfig
from pocketmq.errors import InvalidArgumentError

POSITIVE = (
    "batch_size",
    "concurrency",
    "pull_batch",
    "long_poll",
    "consume_timeout",
    "max_cached_per_queue",
    "max_cached_bytes_per_queue",
    "max_span",
    "offset_persist_interval",
    "rebalance_interval",
)


@pytest.mark.parametrize("name", POSITIVE)
@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan])
def test_a_setting_that_must_be_positive_is_refused_by_name(name: str, bad: float) -> None:
    settings: dict[str, Any] = {name: bad}
    if name == "pull_batch" and bad == math.inf:
        settings["max_span"] = math.inf  # else max_span's own check would speak first
    with pytest.raises(InvalidArgumentError, match=name):
        PushConsumerConfig(**settings)


@pytest.mark.parametrize("name", ["local_retry_delay", "close_timeout"])
@pytest.mark.parametrize("bad", [-0.5, math.inf, math.nan])
def test_a_delay_may_be_zero_but_not_negative_or_endless(name: str, bad: float) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        PushConsumerConfig(**{name: bad})
    assert getattr(PushConsumerConfig(**{name: 0}), name) == 0


def test_max_reconsume_times_is_the_groups_limit_at_minus_one_and_refused_below() -> None:
    assert PushConsumerConfig().max_reconsume_times == -1
    assert PushConsumerConfig(max_reconsume_times=0).max_reconsume_times == 0
    with pytest.raises(InvalidArgumentError, match="max_reconsume_times"):
        PushConsumerConfig(max_reconsume_times=-2)


def test_the_span_must_hold_one_pull() -> None:
    with pytest.raises(InvalidArgumentError, match="max_span must be at least pull_batch"):
        PushConsumerConfig(pull_batch=64, max_span=63)
    assert PushConsumerConfig(pull_batch=64, max_span=64).max_span == 64


def test_the_defaults_pass_their_own_checks() -> None:
    config = PushConsumerConfig()
    assert (config.batch_size, config.pull_batch, config.max_cached_per_queue) == (1, 32, 1000)


@pytest.mark.parametrize("name", ["local_retry_delay", "close_timeout"])
def test_a_delay_that_is_not_a_number_is_refused_by_name(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        PushConsumerConfig(**{name: None})
