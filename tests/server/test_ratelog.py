"""One log line per kind of bad input per interval, on a fake clock."""

from __future__ import annotations

import logging

import pytest

from pocketmq.server.ratelog import RateLimitedLog


def test_one_line_per_key_per_interval_then_a_count_of_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    limiter = RateLimitedLog(logging.getLogger("test.ratelog"), 10.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="test.ratelog")
    logged = [limiter.warning("bad-frame", "bad frame %d", n) for n in range(20_000)]
    assert logged.count(True) == 1
    assert limiter.warning("other", "another kind")  # keys are independent
    now[0] = 9.9
    assert not limiter.warning("bad-frame", "bad frame again")
    now[0] = 10.0
    assert limiter.warning("bad-frame", "bad frame later")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "bad frame 0",
        "another kind",
        "bad frame later (20000 more like this in the last 10 s were not logged)",
    ]


def test_a_traceback_is_kept_for_the_line_that_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimitedLog(logging.getLogger("test.ratelog"), clock=lambda: 0.0)
    try:
        raise ValueError("boom")
    except ValueError as exc:
        limiter.error("internal", "handler failed", exc_info=exc)
        limiter.error("internal", "handler failed", exc_info=exc)
    [record] = [r for r in caplog.records if r.name == "test.ratelog"]
    assert record.exc_info is not None
