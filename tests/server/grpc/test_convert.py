"""The adapter's pure parts: message conversion, endpoints, status mapping, settings."""

from __future__ import annotations

import gzip
import hashlib

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2
from rocketmq.v5.model.message import Message as OfficialMessage

from pocketmq import properties as props
from pocketmq.broker import Delivered, GroupConfig, RetryPolicy
from pocketmq.errors import (
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    LocalProtocolError,
    MessageNotFoundError,
    MessageTooLargeError,
    RemoteProtocolError,
    StorageFullError,
    TooManyRequestsError,
    TopicNotFoundError,
    UnsupportedError,
)
from pocketmq.server.grpc.convert import delivered_message, endpoints, inbound_message
from pocketmq.server.grpc.settings import consumer_settings, exponential_form
from pocketmq.server.grpc.status import V2Error, error_status

d = definition_pb2
MT = d.MessageType
NOW_MS = 1_800_000_000_000


def _message(body: bytes = b"body", **system: object) -> object:
    system.setdefault("message_id", "01ABC")
    return d.Message(
        topic=d.Resource(name="T"),
        body=body,
        user_properties={"k": "v"},
        system_properties=d.SystemProperties(**system),
    )


def _inbound(message: object):
    return inbound_message(message, NOW_MS)


def test_system_properties_become_pocketmq_properties() -> None:
    inbound, kind = _inbound(
        _message(tag="t", keys=["a", "b"], born_timestamp={"seconds": 1_700_000_000})
    )
    assert kind == MT.NORMAL
    assert inbound.topic == "T"
    assert inbound.queue_id == -1  # the broker places it
    assert inbound.born_timestamp == 1_700_000_000_000
    assert inbound.properties == {
        "k": "v",
        props.MESSAGE_ID: "01ABC",
        props.TAGS: "t",
        props.KEYS: "a b",
    }


def test_fifo_and_delay() -> None:
    fifo, kind = _inbound(_message(message_group="g", message_type=MT.FIFO))
    assert (kind, fifo.properties[props.MESSAGE_GROUP]) == (MT.FIFO, "g")
    due = NOW_MS + 5_000
    seconds, _ = _inbound(
        _message(message_type=MT.DELAY, delivery_timestamp={"seconds": due // 1000})
    )
    assert seconds.properties[props.DELIVER_TIME_MS] == str(due)
    # the Python client's ms-in-the-seconds-field quirk
    millis, _ = _inbound(_message(message_type=MT.DELAY, delivery_timestamp={"seconds": due}))
    assert millis.properties[props.DELIVER_TIME_MS] == str(due)
    past, _ = _inbound(_message(message_type=MT.DELAY, delivery_timestamp={"seconds": 1}))
    # due already: still a delay message to the broker's rules, which delivers it at once
    assert past.properties[props.DELIVER_TIME_MS] == "1000"


def test_an_unspecified_type_is_inferred() -> None:
    _, kind = _inbound(_message(message_group="g"))
    assert kind == MT.FIFO
    _, kind = _inbound(_message(delivery_timestamp={"seconds": NOW_MS // 1000 + 1}))
    assert kind == MT.DELAY


def test_gzip_bodies_are_stored_plain() -> None:
    inbound, _ = _inbound(_message(gzip.compress(b"x" * 100), body_encoding=d.Encoding.GZIP))
    assert inbound.body == b"x" * 100
    with pytest.raises(V2Error) as error:
        _inbound(_message(b"not gzip", body_encoding=d.Encoding.GZIP))
    assert error.value.code == Code.MESSAGE_CORRUPTED


@pytest.mark.parametrize(
    ("system", "code"),
    [
        ({"message_type": MT.FIFO}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (
            {"message_group": "g", "message_type": MT.NORMAL},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        ({"message_type": MT.DELAY}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"message_type": MT.PRIORITY}, Code.UNSUPPORTED),
        ({"message_type": MT.LITE}, Code.UNSUPPORTED),
        ({"keys": ["has space"]}, Code.ILLEGAL_MESSAGE_KEY),
    ],
)
def test_what_the_v2_form_cannot_carry_is_refused_in_translation(system: dict, code: int) -> None:
    """A declared type that contradicts the message's fields, or keys that would not survive
    being joined with spaces: refused before the broker sees them. Everything else (tags, body,
    delivery time, the topic's type) is the broker's send contract (test_send_contract.py)."""
    with pytest.raises(V2Error) as error:
        _inbound(_message(**system))
    assert error.value.code == code


def test_reserved_user_properties_are_refused() -> None:
    reserved = _message()
    reserved.user_properties[props.MESSAGE_ID] = "mine"
    with pytest.raises(V2Error) as error:
        _inbound(reserved)
    assert error.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_delivered_message_carries_what_the_clients_need() -> None:
    delivered = Delivered(
        topic="T",
        queue_id=2,
        queue_offset=7,
        body=b"payload",
        properties={
            props.MESSAGE_ID: "ID",
            props.TAGS: "t",
            props.KEYS: "a b",
            props.MESSAGE_GROUP: "g",
            props.RETRY_TOPIC: "T",
            "user": "yes",
        },
        born_timestamp=1_700_000_000_123,
        store_timestamp=1_700_000_000_456,
        physical_offset=99,
        delivery_attempt=3,
        receipt_handle="2:7:tok",
        born_host="10.0.0.1:0",
    )
    message = delivered_message(delivered, "ns", "127.0.0.1:8081")
    system = message.system_properties
    assert message.topic.name == "T"
    assert message.topic.resource_namespace == "ns"
    assert dict(message.user_properties) == {"user": "yes"}
    assert system.body_encoding == d.Encoding.IDENTITY
    assert system.body_digest.type == d.DigestType.MD5
    assert system.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert (system.message_id, system.tag, list(system.keys)) == ("ID", "t", ["a", "b"])
    assert (system.message_group, system.message_type) == ("g", MT.FIFO)
    assert (system.queue_id, system.queue_offset) == (2, 7)
    assert (system.delivery_attempt, system.receipt_handle) == (3, "2:7:tok")
    assert (system.born_timestamp.seconds, system.born_timestamp.nanos) == (
        1_700_000_000,
        123_000_000,
    )
    assert system.store_timestamp.seconds == 1_700_000_000
    assert (system.born_host, system.store_host) == ("10.0.0.1", "127.0.0.1:8081")


def test_a_born_host_name_survives_the_address_only_record_field() -> None:
    # The official Java, Go and Node.js clients send their host name, Python an IP address.
    named, _ = _inbound(_message(born_host="worker-7.example"))
    assert named.properties[props.BORN_HOST] == "worker-7.example"
    addressed, _ = _inbound(_message(born_host="10.0.0.9"))
    assert props.BORN_HOST not in addressed.properties

    def deliver(properties: dict[str, str]) -> object:
        return delivered_message(
            Delivered(
                topic="T",
                queue_id=0,
                queue_offset=0,
                body=b"b",
                properties=properties,
                born_timestamp=1,
                store_timestamp=2,
                physical_offset=0,
                born_host="10.0.0.9:0",
            ),
            "",
            "127.0.0.1:8081",
        )

    named_out = deliver(named.properties)
    assert named_out.system_properties.born_host == "worker-7.example"
    assert props.BORN_HOST not in named_out.user_properties
    assert deliver(addressed.properties).system_properties.born_host == "10.0.0.9"
    reserved = _message()
    reserved.user_properties[props.BORN_HOST] = "spoofed"
    with pytest.raises(V2Error):
        _inbound(reserved)


# b"body-0" has the CRC32 0x060BB6A6: a digest the official clients' CRC32 checks disagree on
# (Python compares "060BB6A6", Java/Go/C# "60BB6A6", Node.js "101430950"). MD5 they all compare
# the same way: upper-case hex (Java Utilities.md5CheckSum, Go message.go, Node.js md5CheckSum,
# C# Utilities.ComputeMd5Hash), which is also what RocketMQ's proxy sends (GrpcConverter).
@pytest.mark.parametrize("body", [b"payload", b"body-0", bytes(range(256)) * 5])
def test_body_digest_is_the_md5_every_official_client_verifies(body: bytes) -> None:
    delivered = Delivered(
        topic="T",
        queue_id=0,
        queue_offset=0,
        body=body,
        properties={props.MESSAGE_ID: "ID"},
        born_timestamp=1,
        store_timestamp=2,
        physical_offset=0,
    )
    message = delivered_message(delivered, "", "127.0.0.1:8081")
    digest = message.system_properties.body_digest
    assert digest.type == d.DigestType.MD5
    assert digest.checksum == hashlib.md5(body).hexdigest().upper()
    decoded = OfficialMessage()
    decoded.fromProtobuf(message)  # the Python client's own verification
    assert not decoded.corrupted
    assert decoded.body == body


def test_endpoints_schemes() -> None:
    assert endpoints("127.0.0.1:8081").scheme == d.AddressScheme.IPv4
    v6 = endpoints("[::1]:8081")
    assert (v6.scheme, v6.addresses[0].host, v6.addresses[0].port) == (
        d.AddressScheme.IPv6,
        "::1",
        8081,
    )
    assert endpoints("broker.local:8081").scheme == d.AddressScheme.DOMAIN_NAME


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (TopicNotFoundError("t"), Code.TOPIC_NOT_FOUND),
        (GroupNotFoundError("g"), Code.CONSUMER_GROUP_NOT_FOUND),
        (MessageTooLargeError("big"), Code.MESSAGE_BODY_TOO_LARGE),
        (InvalidReceiptHandleError("h"), Code.INVALID_RECEIPT_HANDLE),
        (TooManyRequestsError("busy"), Code.TOO_MANY_REQUESTS),
        (MessageNotFoundError("gone"), Code.NOT_FOUND),  # never MESSAGE_NOT_FOUND (= success)
        (UnsupportedError("no"), Code.UNSUPPORTED),
        (StorageFullError("disk"), Code.INTERNAL_SERVER_ERROR),
        (InvalidArgumentError("bad"), Code.BAD_REQUEST),
        (LocalProtocolError("frame body of 9 MiB exceeds 8 MiB"), Code.BAD_REQUEST),
        (RemoteProtocolError("malformed body"), Code.BAD_REQUEST),
        (V2Error(Code.ILLEGAL_TOPIC, "x"), Code.ILLEGAL_TOPIC),
    ],
)
def test_error_status(error: Exception, code: int) -> None:
    status = error_status(error, "Test")
    assert status.code == code
    assert status.message


def test_unexpected_errors_are_internal(caplog: pytest.LogCaptureFixture) -> None:
    status = error_status(RuntimeError("boom"), "Test")
    assert status.code == Code.INTERNAL_SERVER_ERROR
    assert "boom" in status.message
    assert "gRPC Test failed" in caplog.text


def _consumer_settings(group: GroupConfig, language: int = 0, version: str = ""):
    request = d.Settings(
        client_type=d.ClientType.PUSH_CONSUMER,
        subscription=d.Subscription(group=d.Resource(name=group.name)),
        user_agent=d.UA(language=language, version=version),
    )
    return consumer_settings(request, group, (1, 5, 10, 30, 60), 30.0)


def test_backoff_from_the_group_retry_policy() -> None:
    default = _consumer_settings(GroupConfig(name="g"))  # delay levels from level 3
    assert default.backoff_policy.max_attempts == 17
    assert [x.seconds for x in default.backoff_policy.customized_backoff.next][:3] == [10, 30, 60]
    exponential = _consumer_settings(
        GroupConfig(name="g", retry=RetryPolicy(max_retries=4, initial=1, multiplier=2, maximum=5))
    )
    assert [x.seconds for x in exponential.backoff_policy.customized_backoff.next] == [1, 2, 4, 5]
    forever = _consumer_settings(GroupConfig(name="g", retry=RetryPolicy(max_retries=-1)))
    assert forever.backoff_policy.max_attempts == 2**31 - 1
    assert not forever.subscription.fifo
    assert forever.subscription.long_polling_timeout.seconds == 20


def test_node_consumers_get_an_exponential_policy_in_the_units_they_wait() -> None:
    # rocketmq-client-nodejs 1.0.8 reads only exponential_backoff, and waits its whole seconds as
    # milliseconds (ExponentialBackoffRetryPolicy.getNextAttemptDelay -> setTimeout)
    group = GroupConfig(name="g", fifo=True, retry=RetryPolicy(max_retries=3, delays=(1.5, 3, 6)))
    node = _consumer_settings(group, d.Language.NODE_JS, "1.0.8").backoff_policy
    assert node.WhichOneof("strategy") == "exponential_backoff"
    assert node.max_attempts == 4
    backoff = node.exponential_backoff
    assert (backoff.initial.seconds, backoff.max.seconds, backoff.multiplier) == (1500, 6000, 2.0)
    later = _consumer_settings(group, d.Language.NODE_JS, "1.1.0").backoff_policy
    backoff = later.exponential_backoff
    assert (backoff.initial.seconds, backoff.initial.nanos, backoff.max.seconds) == (1, 5e8, 6)
    for language in (d.Language.PYTHON, d.Language.JAVA, d.Language.GOLANG, 0):
        other = _consumer_settings(group, language).backoff_policy
        assert other.WhichOneof("strategy") == "customized_backoff"
        assert [x.seconds for x in other.customized_backoff.next] == [1, 3, 6]


@pytest.mark.parametrize(
    ("retry", "form"),
    [
        (RetryPolicy(max_retries=5, initial=2, multiplier=3, maximum=60), (2, 3, 60)),
        (RetryPolicy(max_retries=4, delays=(1, 2, 4, 8)), (1, 2.0, 8)),
        (RetryPolicy(max_retries=4, delays=(5,)), (5, 1.0, 5)),
        (RetryPolicy(max_retries=3, delays=(0, 0, 0)), (0, 1.0, 0)),
        (RetryPolicy(max_retries=3, delays=(0, 2, 8)), (2, 4.0, 8)),
        (RetryPolicy(max_retries=3, delays=(9, 1, 3)), (9, 1.0, 9)),
        (RetryPolicy(max_retries=0, delays=(5,)), (0, 1.0, 0)),
    ],
)
def test_the_exponential_form_of_a_groups_delays(
    retry: RetryPolicy, form: tuple[float, float, float]
) -> None:
    delays = [retry.delay(n, ()) for n in range(1, retry.max_retries + 1)]
    assert exponential_form(retry, delays) == pytest.approx(form)


def test_default_delay_levels_are_fitted_through_the_first_and_longest() -> None:
    levels = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
    retry = RetryPolicy()  # levels from 3: 10 s ... 2 h over 16 retries
    delays = [retry.delay(n, levels) for n in range(1, 17)]
    initial, multiplier, maximum = exponential_form(retry, delays)
    assert (initial, maximum) == (10, 7200)
    assert initial * multiplier**15 == pytest.approx(7200)  # the longest wait at the 16th retry
