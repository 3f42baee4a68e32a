"""The send contract's rules, as pure functions (pocketmq.contract): one rule set that the SDK
checks early and the broker enforces for every protocol."""

from __future__ import annotations

import pytest

from pocketmq import properties as props
from pocketmq.contract import (
    ACCEPTED_KINDS,
    MessageKind,
    Rule,
    check_keys,
    check_message,
    check_user_properties,
    kind_of,
)

NOW = 1_800_000_000_000
DAY = 86_400_000


def test_a_plain_message_passes() -> None:
    properties = {props.TAGS: "t", props.KEYS: "a b"}
    assert check_message("orders", 10, properties, max_body=1024, now_ms=NOW) is None


@pytest.mark.parametrize(
    ("properties", "options", "rule"),
    [
        ({}, {"size": 0}, Rule.BODY_EMPTY),
        ({}, {"size": 2048}, Rule.BODY_TOO_LARGE),
        ({props.TAGS: "a||b"}, {}, Rule.TAG),
        ({props.KEYS: "   "}, {}, Rule.KEY),
        ({"": "v"}, {}, Rule.PROPERTY),
        ({props.DELIVER_TIME_MS: "soon"}, {}, Rule.DELIVERY_TIME),
        ({props.DELIVER_TIME_MS: str(NOW + 4 * DAY)}, {}, Rule.DELIVERY_TIME),
        ({props.DELIVER_TIME_MS: "-5"}, {}, Rule.DELIVERY_TIME),
        ({}, {"flags": 2**32}, Rule.FIELD_RANGE),
        ({}, {"born_timestamp": -1}, Rule.FIELD_RANGE),
        ({props.DELIVER_TIME_MS: str(NOW + 5)}, {"topic_type": "fifo"}, Rule.MESSAGE_TYPE),
        ({}, {"topic_type": "fifo"}, Rule.MESSAGE_TYPE),
        ({}, {"topic_type": "delay"}, Rule.MESSAGE_TYPE),
        ({}, {"topic_type": "transaction"}, Rule.MESSAGE_TYPE),
    ],
)
def test_each_rule(properties: dict[str, str], options: dict[str, object], rule: Rule) -> None:
    size = options.pop("size", 10)
    violation = check_message(
        "orders",
        size,  # type: ignore[arg-type]
        properties,
        max_body=1024,
        now_ms=NOW,
        max_delay_ms=3 * DAY,
        **options,  # type: ignore[arg-type]
    )
    assert violation is not None
    assert violation.rule is rule
    assert violation.text


def test_kinds_and_what_each_topic_type_accepts() -> None:
    assert kind_of({}) is MessageKind.NORMAL
    assert kind_of({props.MESSAGE_GROUP: "g"}) is MessageKind.FIFO
    assert kind_of({props.DELIVER_TIME_MS: "1"}) is MessageKind.DELAY
    assert kind_of({props.DELAY_LEVEL: "3"}) is MessageKind.DELAY
    assert kind_of({props.DELAY_LEVEL: "0"}) is MessageKind.NORMAL
    assert kind_of({props.TRANSACTION_PREPARED: "true"}) is MessageKind.TRANSACTION
    assert kind_of({}, flags=1) is MessageKind.TRANSACTION
    assert ACCEPTED_KINDS["fifo"] == {MessageKind.FIFO}
    assert ACCEPTED_KINDS["normal"] == set(MessageKind)


def test_key_lists_and_user_property_names() -> None:
    assert check_keys(["a", "b"]) is None
    assert check_keys(["a b"]).rule is Rule.KEY  # type: ignore[union-attr]
    assert check_keys([""]).rule is Rule.KEY  # type: ignore[union-attr]
    assert check_user_properties(["mine"]) is None
    assert check_user_properties([props.MESSAGE_ID]).rule is Rule.PROPERTY  # type: ignore[union-attr]
    assert check_user_properties([""]).rule is Rule.PROPERTY  # type: ignore[union-attr]
