"""The producer's send path made cheaper without changing what it does (docs/benchmarks.md,
"Producer send path"): ``validate_message`` against the version before (same errors, in the
same order, for the same messages), message ids against their old formula, a request's timers
(one at a time: the slow watch's, then the expiry's), and the accumulator acting when ``add``
is called."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq import Message, ids
from pocketmq import properties as props
from pocketmq.client.connection import ClientConnection
from pocketmq.client.convert import _check_text, validate_message
from pocketmq.client.producer.accumulator import Accumulator
from pocketmq.client.producer.config import ProducerConfig
from pocketmq.contract import check_keys, check_message, check_user_properties
from pocketmq.errors import InvalidArgumentError, RequestTimeoutError
from pocketmq.names import validate_stored_topic
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w

from .test_connection_writes import RecordingTransport

_MAX_DELIVERY_TIME = (2**63 - 1) / 1000


def reference_validate(message: Any, max_size: int | None = None) -> None:
    """``validate_message`` as it was before it was made cheaper (commit e9b3978)."""
    if not isinstance(message, Message):
        raise InvalidArgumentError(f"expected a pocketmq.Message, got {type(message).__name__}")
    if not isinstance(message.topic, str) or not message.topic:
        raise InvalidArgumentError("message topic must be a non-empty string")
    if not isinstance(message.body, bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"message body must be bytes, got {type(message.body).__name__} "
            "(encode text with .encode())"
        )
    if message.tag is not None and not isinstance(message.tag, str):
        raise InvalidArgumentError("tag must be a string")
    for key in message.keys:
        if not isinstance(key, str):
            raise InvalidArgumentError(f"key {key!r} must be a string")
    for name, value in message.properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidArgumentError("properties must map strings to strings")
    for text, what in ((message.message_group, "message group"), (message.message_id, "id")):
        if text is not None and not isinstance(text, str):
            raise InvalidArgumentError(f"message {what} must be a string")
    delivery = message.delivery_time
    if delivery is not None and (
        isinstance(delivery, bool)
        or not isinstance(delivery, int | float)
        or not 0 <= delivery <= _MAX_DELIVERY_TIME
    ):
        raise InvalidArgumentError(
            f"delivery_time must be epoch seconds (a finite, non-negative number), got {delivery!r}"
        )
    validate_stored_topic(message.topic)
    for text, what in (
        (message.tag, "tag"),
        (message.message_group, "message group"),
        (message.message_id, "message id"),
        *((key, "key") for key in message.keys),
        *((name, "property name") for name in message.properties),
        *((value, f"property {name!r}") for name, value in message.properties.items()),
    ):
        if text:
            _check_text(text, what)
    violation = (
        check_keys(message.keys)
        or check_user_properties(message.properties)
        or check_message(
            message.topic,
            len(message.body),
            {props.TAGS: message.tag} if message.tag else {},
            max_body=max_size if max_size is not None else len(message.body),
        )
    )
    if violation is not None:
        raise InvalidArgumentError(violation.text)


def _outcome(validate: Any, message: Any, max_size: int | None) -> tuple[str, str]:
    try:
        validate(message, max_size)
    except Exception as exc:  # the type and the words must be the same
        return (type(exc).__name__, str(exc))
    return ("ok", "")


_TEXT = st.sampled_from(["", "a", "b c", "x||y", "\udcff", "é", "UNIQ_KEY", "TAGS", " "])
_ANY = st.one_of(_TEXT, st.none(), st.integers(-1, 1), st.just(b"x"), st.floats())


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly well-typed values, sometimes anything (the wrong types must fail the same way)."""
    return st.one_of(strategy, strategy, strategy, _ANY)


@st.composite
def messages(draw: st.DrawFn) -> Any:
    fields: dict[str, Any] = {
        "topic": draw(_maybe(st.sampled_from(["t", "orders", "%RETRY%g", "a@b", "t\udcff", ""]))),
        "body": draw(_maybe(st.sampled_from([b"x", b"", b"y" * 40, bytearray(b"z")]))),
    }
    if draw(st.booleans()):
        fields["tag"] = draw(st.one_of(st.none(), _maybe(_TEXT)))
    if draw(st.booleans()):
        fields["keys"] = tuple(draw(st.lists(_maybe(_TEXT), max_size=3)))
    if draw(st.booleans()):
        fields["properties"] = draw(
            st.dictionaries(_maybe(_TEXT), _maybe(_TEXT), max_size=3)  # type: ignore[arg-type]
        )
    for name in ("message_group", "message_id"):
        if draw(st.booleans()):
            fields[name] = draw(st.one_of(st.none(), _maybe(_TEXT)))
    if draw(st.booleans()):
        fields["delivery_time"] = draw(
            st.one_of(st.none(), st.floats(), st.integers(-5, 2**70), st.booleans(), _TEXT)
        )
    return Message(**fields)


@settings(max_examples=300, deadline=None)
@given(messages(), st.sampled_from([None, 0, 1, 10, 4 * 1024 * 1024]))
def test_validate_message_refuses_what_it_refused_before_with_the_same_words(
    message: Message, max_size: int | None
) -> None:
    assert _outcome(validate_message, message, max_size) == _outcome(
        reference_validate, message, max_size
    )


def test_every_mix_of_bad_fields_is_reported_as_before() -> None:
    """Which error wins when several fields are wrong: each text field good, empty, not text,
    or of the wrong type, in every combination."""
    choices = ["ok", "", "x\udcff", 5]
    for tag, group, mid, key, name, value in itertools.product(choices, repeat=6):
        message = Message(
            topic="t",
            body=b"x",
            tag=tag,  # type: ignore[arg-type]
            message_group=group,  # type: ignore[arg-type]
            message_id=mid,  # type: ignore[arg-type]
            keys=(key,),  # type: ignore[arg-type]
            properties={name: value},  # type: ignore[dict-item]
        )
        assert _outcome(validate_message, message, None) == _outcome(
            reference_validate, message, None
        ), message


@pytest.mark.parametrize("bad", [None, "m", 3, {"topic": "t"}])
def test_not_a_message_is_refused_as_before(bad: object) -> None:
    assert _outcome(validate_message, bad, None) == _outcome(reference_validate, bad, None)


def test_a_message_id_is_the_same_three_fields_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    def old(millis: int, counter: int) -> str:
        mask = 0xFFFFFFFFFFFF
        return f"{millis & mask:012X}{ids._PROCESS:08X}{counter & mask:012X}"

    for millis, counter in [(1_700_000_000_123, 7), (2**48 + 5, 2**48 + 9), (0, 0)]:
        monkeypatch.setattr(ids.time, "time_ns", lambda m=millis: m * 1_000_000 + 999_999)
        monkeypatch.setattr(ids, "_counter", itertools.count(counter))
        assert ids.new_message_id() == old(millis, counter)


def _connection() -> ClientConnection:
    connection = ClientConnection("127.0.0.1:1", None)
    connection.connection_made(RecordingTransport())  # type: ignore[arg-type]
    return connection


def _live_timers() -> int:
    loop: Any = asyncio.get_running_loop()
    return sum(not handle.cancelled() for handle in loop._scheduled)


async def test_a_late_request_starts_its_watch_and_still_expires_at_its_timeout() -> None:
    connection = _connection()
    started: list[float] = []
    loop = asyncio.get_running_loop()
    begun = loop.time()

    def watch(future: asyncio.Future[Any], abort: Any) -> None:
        started.append(loop.time() - begun)
        assert not future.done()

    with pytest.raises(RequestTimeoutError, match=r"no answer in 0\.2s"):
        await connection.request(
            RequestCode.GET_ROUTE, w.GetRouteRequest("t"), w.RouteResponse, 0.2, slow=(0.05, watch)
        )
    assert len(started) == 1
    assert 0.05 <= started[0] < 0.2
    assert 0.2 <= loop.time() - begun < 1.0
    assert _live_timers() == 0


async def test_a_watch_may_abort_the_request() -> None:
    connection = _connection()

    def watch(future: asyncio.Future[Any], abort: Any) -> None:
        abort(RuntimeError("moved"))

    with pytest.raises(RuntimeError, match="moved"):
        await connection.request(
            RequestCode.GET_ROUTE, w.GetRouteRequest("t"), w.RouteResponse, 5, slow=(0.01, watch)
        )
    assert _live_timers() == 0


async def test_answered_requests_leave_one_timer_that_ends_by_itself() -> None:
    """One timer per connection, not per request (docs/benchmarks.md, "Producer send path,
    fewer levels"): however many requests were answered, at most the connection's watchdog is
    left, and it ends when it fires with nothing waiting, starting no watch."""
    connection = _connection()
    started: list[Any] = []
    for n in range(1, 51):
        task = asyncio.ensure_future(
            connection.request(
                RequestCode.GET_ROUTE,
                w.GetRouteRequest("t"),
                None,
                5,
                slow=(0.05, lambda f, a: started.append(f)),
            )
        )
        await asyncio.sleep(0)
        assert _live_timers() == 1  # the watchdog, at the first request's watch
        connection._pending[n][0].set_result(None)
        await task
    assert _live_timers() <= 1
    await asyncio.sleep(0.1)
    assert _live_timers() == 0
    assert started == []


async def test_a_watchdog_serves_each_request_at_its_own_time() -> None:
    """A request behind others with later due times still starts its watch and expires at
    its own times; one answered meanwhile is left alone."""
    connection = _connection()
    loop = asyncio.get_running_loop()
    begun = loop.time()
    watched: dict[str, float] = {}

    def watch(name: str) -> Any:
        return lambda future, abort: watched.setdefault(name, loop.time() - begun)

    slow = asyncio.ensure_future(
        connection.request(
            RequestCode.GET_ROUTE, w.GetRouteRequest("s"), None, 0.5, slow=(0.3, watch("slow"))
        )
    )
    answered = asyncio.ensure_future(
        connection.request(
            RequestCode.GET_ROUTE, w.GetRouteRequest("a"), None, 0.5, slow=(0.05, watch("a"))
        )
    )
    quick = asyncio.ensure_future(
        connection.request(
            RequestCode.GET_ROUTE, w.GetRouteRequest("q"), None, 0.15, slow=(0.1, watch("quick"))
        )
    )
    await asyncio.sleep(0)
    connection._pending[2][0].set_result(None)
    await answered
    with pytest.raises(RequestTimeoutError, match=r"no answer in 0\.1s"):
        await quick
    assert 0.15 <= loop.time() - begun < 0.3
    with pytest.raises(RequestTimeoutError, match=r"no answer in 0\.5s"):
        await slow
    assert 0.5 <= loop.time() - begun < 1.0
    assert set(watched) == {"quick", "slow"}
    assert 0.1 <= watched["quick"] < 0.15
    assert 0.3 <= watched["slow"] < 0.5
    assert _live_timers() == 0


async def test_add_holds_or_marks_the_message_when_called() -> None:
    """A lone send is "in flight" from the moment ``add`` returns: a second message added
    before the first is awaited waits for it, and a flush waits for both."""
    sent: list[list[bytes]] = []

    async def send_batch(topic: str, wires: list[w.InboundMessage]) -> list[Any]:
        sent.append([wire.body for wire in wires])
        await asyncio.sleep(0)
        return [wire.body for wire in wires]

    accumulator = Accumulator(ProducerConfig(), send_batch)
    first = accumulator.add(w.InboundMessage("t", b"1"))
    second = accumulator.add(w.InboundMessage("t", b"2"))
    assert len(accumulator.in_flight) == 1
    assert await first == b"1"
    assert await second == b"2"
    assert sent == [[b"1"], [b"2"]]


def test_properties_may_be_any_mapping() -> None:
    class Frozen(Mapping[str, str]):
        def __getitem__(self, key: str) -> str:
            return {"a": "1"}[key]

        def __iter__(self) -> Any:
            return iter(["a"])

        def __len__(self) -> int:
            return 1

    message = Message(topic="t", body=b"x", properties=Frozen())
    validate_message(message)
    reference_validate(message)


def test_a_send_result_is_an_immutable_hashable_value() -> None:
    from pocketmq.client.message import SendResult, SendStatus

    def build() -> SendResult:
        return SendResult(
            message_id="m", topic="t", queue_id=3, queue_offset=9, broker_name="b",
            status=SendStatus.FLUSH_DISK_TIMEOUT, transaction_id="tx",
        )  # fmt: skip

    result = build()
    assert result == build()
    assert hash(result) == hash(build())
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert (
        SendResult(message_id="m", topic="t", queue_id=0, queue_offset=0, broker_name="b").status
        is SendStatus.OK
    )
    with pytest.raises(AttributeError):
        result.queue_id = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        SendResult("m", "t", 3, 9, "b")  # type: ignore[misc]  # keyword-only, as before
