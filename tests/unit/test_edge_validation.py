"""Issue 14 "wrong errors" in the SDK and the CLI: values that used to surface as raw Python
errors (``ValueError: cannot convert float NaN to integer``, ``UnicodeEncodeError``) deep in a
send are refused up front with :class:`InvalidArgumentError` or a usage error. Nothing here
reaches a broker: the address is a closed port."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from pocketmq import Message
from pocketmq.broker.groups import RetryPolicy
from pocketmq.cli import main
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


def test_an_exponential_retry_that_never_gives_up_does_not_overflow() -> None:
    policy = RetryPolicy(max_retries=-1, initial=1.0, multiplier=2.0, maximum=600.0)
    assert policy.delay(5000, ()) == 600.0


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--server", NOWHERE])
    assert isinstance(result.exception, SystemExit), result.exception  # a clean exit, no crash
    return result.exit_code, result.output


@pytest.mark.parametrize("delay", ["nan", "1e400", "inf", "-5s", "soon"])
def test_cli_send_refuses_a_delay_that_is_no_duration(delay: str) -> None:
    code, output = _cli("send", "t", "body", "--delay", delay)
    assert code == 2
    assert "is not a duration" in output


def test_cli_send_refuses_an_empty_property_name() -> None:
    code, output = _cli("send", "t", "body", "--property", "=value")
    assert code == 1
    assert "property name must not be empty" in output


@pytest.mark.parametrize("multiplier", ["nan", "1e308", "x", "0.5"])
def test_cli_group_create_refuses_a_bad_multiplier(multiplier: str) -> None:
    code, output = _cli("group", "create", "g", "--retry-exponential", f"1s,{multiplier},1m")
    assert code == 2
    assert "multiplier" in output
