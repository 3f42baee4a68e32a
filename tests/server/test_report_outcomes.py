"""``REPORT_OUTCOMES`` (server/native/handlers/admin.py): reported attempts reach the attempt
history under the report's group and reporter, records out of range are refused by name and the
rest kept (docs/semantics.md, "Attempt history")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker import Broker, BrokerConfig, GroupConfig
from pocketmq.contract import MAX_TIMESTAMP_MS
from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol import structs as w
from pocketmq.server.native.handlers import AdminHandlers
from pocketmq.server.native.validation import (
    MAX_ATTEMPT,
    attempt_problem,
    attempts_out_of_range,
)

CONNECTION: Any = SimpleNamespace(client_id="conn-client")
NOW = 1_764_000_000_000


async def _unused() -> Any:
    raise AssertionError("not asked")


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), broker_name="b1"))
    broker.create_topic("orders", queues=1)
    broker.create_group(GroupConfig("g"))
    yield broker
    await broker.close()


def _attempt(n: int, **fields: Any) -> w.Attempt:
    values: dict[str, Any] = {
        "message_id": f"M{n}",
        "group": "g",
        "topic": "orders",
        "attempt": 1,
        "consumer": "c1",
        "outcome": "SUCCESS",
        "error": "",
        "delivered_at": NOW,
        "finished_at": NOW + 1,
    }
    values.update(fields)
    return w.Attempt(**values)


async def test_reported_attempts_are_recorded_under_the_report_s_group_and_reporter(
    broker: Broker,
) -> None:
    admin = AdminHandlers(broker, _unused)
    attempts = [
        _attempt(0),
        _attempt(1, group="other", consumer="someone", error="e" * 5000),
        _attempt(2, consumer=""),
    ]
    admin.report_outcomes(CONNECTION, w.ReportOutcomesRequest("g", "c1", attempts))
    [first] = broker.message_history("M0")
    assert first == attempts[0]
    [second] = broker.message_history("M1")
    assert (second.group, second.consumer, len(second.error)) == ("g", "c1", 2000)
    [third] = broker.message_history("M2")
    assert third.consumer == "c1"
    admin.report_outcomes(CONNECTION, w.ReportOutcomesRequest("g", "", [_attempt(3)]))
    [fourth] = broker.message_history("M3")
    assert fourth.consumer == "conn-client"  # a report without a consumer: the connection's


async def test_records_out_of_range_are_refused_by_name_and_the_rest_kept(broker: Broker) -> None:
    admin = AdminHandlers(broker, _unused)
    attempts = [_attempt(0), _attempt(1, attempt=-1), _attempt(2), _attempt(3, finished_at=-5)]
    with pytest.raises(InvalidArgumentError, match=r"2 of 4 attempt records refused: attempt -1"):
        admin.report_outcomes(CONNECTION, w.ReportOutcomesRequest("g", "c1", attempts))
    assert [len(broker.message_history(f"M{n}")) for n in range(4)] == [1, 0, 1, 0]


EDGES = [-1, 0, 1, MAX_ATTEMPT, MAX_ATTEMPT + 1, MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1, -(2**63)]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(EDGES) | st.integers(-(2**63), 2**63 - 1),
            st.sampled_from(EDGES) | st.integers(-(2**63), 2**63 - 1),
            st.sampled_from(EDGES) | st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=8,
    )
)
def test_the_one_pass_check_refuses_what_the_named_check_refuses(
    numbers: list[tuple[int, int, int]],
) -> None:
    records = [
        _attempt(n, attempt=a, delivered_at=d, finished_at=f) for n, (a, d, f) in enumerate(numbers)
    ]
    assert attempts_out_of_range(records) == [r for r in records if attempt_problem(r)]
