"""Values that used to surface as raw Python errors (``ValueError: cannot convert float NaN to
integer``, ``UnicodeEncodeError``) deep in a send are refused up front by the SDK with
:class:`InvalidArgumentError` (the CLI's side: tests/cli/test_edge_validation.py). Nothing here
reaches a broker: the address is a closed port."""

from __future__ import annotations

import math

import pytest

from pocketmq import Message
from pocketmq.client import Admin
from pocketmq.client.convert import to_wire, validate_message
from pocketmq.errors import InvalidArgumentError

NOWHERE = "127.0.0.1:9"  # discard port: nothing listens


@pytest.mark.parametrize("delivery_time", [math.nan, math.inf, 1e400, -1.0, 1e300, "soon"])
def test_a_delivery_time_must_be_finite_epoch_seconds(delivery_time: object) -> None:
    message = Message(topic="t", body=b"x", delivery_time=delivery_time)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="delivery_time"):
        validate_message(message)


def test_a_valid_delivery_time_still_goes_out() -> None:
    message = Message(topic="t", body=b"x", delivery_time=1_700_000_000.5)
    validate_message(message)
    assert to_wire(message).properties["DELIVER_TIME_MS"] == "1700000000500"


@pytest.mark.parametrize(
    "fields",
    [
        {"properties": {"name": "bad \udcff value"}},
        {"properties": {"bad\ud800name": "v"}},
        {"tag": "t\udcff"},
        {"keys": ("k\udcff",)},
        {"topic": "t\udcff"},
        {"message_group": "g\udcff"},
    ],
)
def test_text_that_is_not_utf8_is_refused(fields: dict[str, object]) -> None:
    message = Message(**{"topic": "t", "body": b"x", **fields})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"surrogate|topic name"):
        validate_message(message)


def test_an_empty_property_name_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="property name"):
        validate_message(Message(topic="t", body=b"x", properties={"": "v"}))


@pytest.mark.parametrize(
    "options",
    [
        {"retry_multiplier": math.nan},
        {"retry_multiplier": 1e308},
        {"retry_multiplier": math.inf},
        {"retry_delays": (1.0, math.nan)},
        {"retry_delays": (1e400,)},
        {"retry_delays": (-1.0,)},
        {"retry_initial": math.nan},
        {"retry_max": math.inf},
        {"max_retries": 2**40},
    ],
)
async def test_admin_refuses_an_unworkable_retry_policy(options: dict[str, object]) -> None:
    async with Admin(servers=NOWHERE) as admin:
        with pytest.raises(InvalidArgumentError):
            await admin.create_group("g", **options)  # type: ignore[arg-type]
