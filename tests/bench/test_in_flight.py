"""The benches' send pool: a refusal for flow control is counted, not raised (a loaded machine
made `pocketmq bench produce` end with ``TooManyRequestsError``)."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.bench import broker as bench
from pocketmq.errors import TooManyRequestsError


class RefusingSends:
    """Refuses the calls whose numbers are listed; accepts the others."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse = refuse
        self.calls = 0
        self.accepted = 0

    async def __call__(self) -> None:
        self.calls += 1
        number = self.calls
        await asyncio.sleep(0)  # the workers interleave, as real sends do
        if number in self.refuse:
            raise TooManyRequestsError("flow control")
        self.accepted += 1


def test_a_throughput_case_counts_refused_sends_and_goes_on() -> None:
    sends = RefusingSends({3, 5, 9})
    refused = asyncio.run(bench.in_flight(20, 4, sends, retry_refused=False))
    assert refused == 3
    assert sends.calls == 20
    assert sends.accepted == 17


def test_a_backlog_retries_refused_sends_until_each_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench, "REFUSED_PAUSE", 0.0)
    sends = RefusingSends({1, 2, 7})
    refused = asyncio.run(bench.in_flight(10, 3, sends))
    assert refused == 3
    assert sends.accepted == 10
    assert sends.calls == 13


def test_a_case_reports_only_the_sends_the_broker_took() -> None:
    meter = bench.Meter(None)
    with meter:
        pass
    result = bench._sent(meter, "pipelined", 1000, 40)
    assert result.messages == 960
    assert result.extra == {"refused": 40.0}
    assert bench._sent(meter, "pipelined", 1000, 0).extra == {}
