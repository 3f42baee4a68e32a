"""The v2 RPCs field by field, through a raw stub: what the broker answers to requests the
official Python client sends (checked here in detail) or never sends (pull and offsets)."""

from __future__ import annotations

import gzip
import hashlib
from typing import Any

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.testing import BrokerProcess

from .conftest import MAX_MESSAGE_SIZE, unique
from .test_errors import _send

d = definition_pb2
s = service_pb2
CLIENT = (("x-mq-client-id", "raw-test-client"),)


def _resource(name: str) -> Any:
    return d.Resource(name=name)


def _settings(stub: Any, settings: Any) -> Any:
    [reply] = list(stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), timeout=5))
    return reply


def test_producer_settings(stub: Any, topic: str) -> None:
    reply = _settings(
        stub,
        d.Settings(
            client_type=d.ClientType.PRODUCER,
            publishing=d.Publishing(topics=[_resource(topic)], max_body_size=1 << 27),
        ),
    )
    assert reply.status.code == Code.OK
    publishing = reply.settings.publishing
    assert publishing.max_body_size == MAX_MESSAGE_SIZE  # the broker's limit, not the client's
    assert publishing.validate_message_type
    assert [t.name for t in publishing.topics] == [topic]
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 3
    assert policy.WhichOneof("strategy") == "exponential_backoff"


def test_push_consumer_settings_come_from_the_group(stub: Any, admin: SyncAdmin) -> None:
    group = unique("fifo-group")
    admin.create_group(group, fifo=True, max_retries=4, retry_delays=[1, 2, 5])
    reply = _settings(
        stub,
        d.Settings(
            client_type=d.ClientType.PUSH_CONSUMER,
            subscription=d.Subscription(group=_resource(group)),
        ),
    )
    assert reply.status.code == Code.OK
    subscription = reply.settings.subscription
    assert subscription.fifo
    assert subscription.long_polling_timeout.seconds == 20
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 5
    assert [x.seconds for x in policy.customized_backoff.next] == [1, 2, 5, 5]


def test_consumer_settings_for_an_unknown_group(stub: Any) -> None:
    reply = _settings(
        stub,
        d.Settings(
            client_type=d.ClientType.SIMPLE_CONSUMER,
            subscription=d.Subscription(group=_resource(unique("nobody"))),
        ),
    )
    assert reply.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    assert not reply.HasField("settings")


def test_query_route_per_topic_type(stub: Any, admin: SyncAdmin, broker: BrokerProcess) -> None:
    host, port = broker.grpc.rsplit(":", 1)
    expected = {
        "normal": [
            d.MessageType.NORMAL,
            d.MessageType.FIFO,
            d.MessageType.DELAY,
            d.MessageType.TRANSACTION,
        ],
        "fifo": [d.MessageType.FIFO],
        "delay": [d.MessageType.DELAY],
        "transaction": [d.MessageType.TRANSACTION],
    }
    for kind, accepted in expected.items():
        topic = unique(kind)
        admin.create_topic(topic, queues=3, topic_type=kind)
        reply = stub.QueryRoute(s.QueryRouteRequest(topic=_resource(topic)), timeout=5)
        assert reply.status.code == Code.OK
        assert [q.id for q in reply.message_queues] == [0, 1, 2]
        for queue in reply.message_queues:
            assert queue.permission == d.Permission.READ_WRITE
            assert list(queue.accept_message_types) == accepted
            assert queue.broker.id == 0
            endpoints = queue.broker.endpoints
            assert endpoints.scheme == d.AddressScheme.IPv4
            assert [(a.host, a.port) for a in endpoints.addresses] == [(host, int(port))]


def test_query_assignment_is_one_per_broker(stub: Any, topic: str, group: str) -> None:
    reply = stub.QueryAssignment(
        s.QueryAssignmentRequest(topic=_resource(topic), group=_resource(group)), timeout=5
    )
    assert reply.status.code == Code.OK
    [assignment] = reply.assignments
    assert assignment.message_queue.id == -1  # the broker pops from all its queues
    assert assignment.message_queue.broker.endpoints.addresses


def test_heartbeat_and_termination(stub: Any, group: str) -> None:
    beat = s.HeartbeatRequest(group=_resource(group), client_type=d.ClientType.SIMPLE_CONSUMER)
    assert stub.Heartbeat(beat, metadata=CLIENT, timeout=5).status.code == Code.OK
    unknown = s.HeartbeatRequest(group=_resource(unique("nobody")))
    assert stub.Heartbeat(unknown, timeout=5).status.code == Code.CONSUMER_GROUP_NOT_FOUND
    bye = s.NotifyClientTerminationRequest(group=_resource(group))
    assert stub.NotifyClientTermination(bye, metadata=CLIENT, timeout=5).status.code == Code.OK


def _receive(stub: Any, topic: str, group: str, **fields: Any) -> list[Any]:
    request = s.ReceiveMessageRequest(
        group=_resource(group),
        message_queue=d.MessageQueue(topic=_resource(topic), id=0),
        batch_size=16,
        long_polling_timeout={"seconds": 1},
        **fields,
    )
    return list(stub.ReceiveMessage(request, metadata=CLIENT, timeout=5))


def test_receive_stream_layout_and_message_fields(stub: Any, topic: str, group: str) -> None:
    _send(stub, topic, gzip.compress(b"zipped"), body_encoding=d.Encoding.GZIP, tag="z")
    replies = _receive(stub, topic, group, invisible_duration={"seconds": 30})
    kinds = [r.WhichOneof("content") for r in replies]
    assert kinds == ["status", "message", "delivery_timestamp"]
    assert replies[0].status.code == Code.OK
    message = replies[1].message
    assert message.body == b"zipped"  # stored decompressed, delivered as IDENTITY
    system = message.system_properties
    assert system.body_encoding == d.Encoding.IDENTITY
    assert system.body_digest.type == d.DigestType.MD5
    assert system.body_digest.checksum == hashlib.md5(b"zipped").hexdigest().upper()
    assert system.delivery_attempt == 1
    assert system.receipt_handle
    assert system.tag == "z"
    assert system.HasField("queue_offset")
    assert system.store_timestamp.seconds > 0
    # nothing more: an empty receive answers MESSAGE_NOT_FOUND (a success for the clients)
    [empty] = _receive(stub, topic, group, invisible_duration={"seconds": 30})
    assert empty.status.code == Code.MESSAGE_NOT_FOUND


def test_receive_refuses_bad_requests(stub: Any, topic: str, group: str) -> None:
    [no_time] = _receive(stub, topic, group)  # neither invisible_duration nor auto_renew
    assert no_time.status.code == Code.ILLEGAL_INVISIBLE_TIME
    [sql] = _receive(
        stub,
        topic,
        group,
        auto_renew=True,
        filter_expression=d.FilterExpression(type=d.FilterType.SQL, expression="a > 1"),
    )
    assert sql.status.code == Code.UNSUPPORTED


def test_a_failed_change_invisible_keeps_the_handle(stub: Any, topic: str, group: str) -> None:
    request = s.ChangeInvisibleDurationRequest(
        group=_resource(group),
        topic=_resource(topic),
        receipt_handle="0:0:stale",
        invisible_duration={"seconds": 5},
    )
    reply = stub.ChangeInvisibleDuration(request, timeout=5)
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
    assert reply.receipt_handle == "0:0:stale"  # the clients overwrite theirs with this


def test_pull_and_offsets(stub: Any, admin: SyncAdmin, broker: BrokerProcess, group: str) -> None:
    topic = unique("pull")
    admin.create_topic(topic, queues=1)
    for i in range(3):
        assert _send(stub, topic, f"p{i}".encode()).status.code == Code.OK
    queue = d.MessageQueue(topic=_resource(topic), id=0)
    pulled = list(
        stub.PullMessage(
            s.PullMessageRequest(
                group=_resource(group), message_queue=queue, offset=1, batch_size=8
            ),
            timeout=5,
        )
    )
    assert [r.WhichOneof("content") for r in pulled] == [
        "status",
        "message",
        "message",
        "next_offset",
    ]
    assert [r.message.body for r in pulled[1:3]] == [b"p1", b"p2"]
    assert pulled[-1].next_offset == 3
    update = s.UpdateOffsetRequest(group=_resource(group), message_queue=queue, offset=2)
    assert stub.UpdateOffset(update, timeout=5).status.code == Code.OK
    got = stub.GetOffset(s.GetOffsetRequest(group=_resource(group), message_queue=queue), timeout=5)
    assert (got.status.code, got.offset) == (Code.OK, 2)
    # the committed offset is shared with native consumers of the group
    native = SyncSimpleConsumer(group, topic, servers=broker.native, await_duration=0.5)
    try:
        assert [m.body for m in native.receive(8, 30)] == [b"p2"]
    finally:
        native.close()
    first = stub.QueryOffset(
        s.QueryOffsetRequest(
            message_queue=queue, query_offset_policy=d.QueryOffsetPolicy.BEGINNING
        ),
        timeout=5,
    )
    last = stub.QueryOffset(
        s.QueryOffsetRequest(message_queue=queue, query_offset_policy=d.QueryOffsetPolicy.END),
        timeout=5,
    )
    assert (first.offset, last.offset) == (0, 3)
    by_time = stub.QueryOffset(
        s.QueryOffsetRequest(
            message_queue=queue, query_offset_policy=d.QueryOffsetPolicy.TIMESTAMP
        ),
        timeout=5,
    )
    assert by_time.status.code == Code.UNSUPPORTED


def test_a_retried_receive_gets_the_same_messages(stub: Any, topic: str, group: str) -> None:
    """Push consumers retry a failed receive with the same attempt_id: the retry must not
    leave the first batch hidden until its invisible time ends."""
    for i in range(3):
        _send(stub, topic, f"r{i}".encode())
    first = _receive(stub, topic, group, auto_renew=True, attempt_id="attempt-1")
    again = _receive(stub, topic, group, auto_renew=True, attempt_id="attempt-1")

    def handles(replies: list[Any]) -> list[str]:
        return [
            r.message.system_properties.receipt_handle for r in replies if r.HasField("message")
        ]

    assert len(handles(first)) == 3
    assert handles(again) == handles(first)
    [empty] = _receive(stub, topic, group, auto_renew=True, attempt_id="attempt-2")
    assert empty.status.code == Code.MESSAGE_NOT_FOUND  # a new attempt pops anew
    [also_empty] = _receive(stub, topic, group, auto_renew=True, attempt_id="attempt-1")
    assert also_empty.status.code == Code.MESSAGE_NOT_FOUND  # only the latest attempt is kept
