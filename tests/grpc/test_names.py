"""Names over gRPC (issue 14, items 7 and 10): an UpdateOffset naming a topic the broker could not
keep in offsets.json (a '@', too long) and an auto-created group too long for its %RETRY% topic
are bad requests; neither reaches a state file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

from .conftest import BROKER_CONFIG, unique

d = definition_pb2
s = service_pb2


def test_update_offset_with_an_unstorable_topic_is_a_bad_request(
    stub: Any, admin: SyncAdmin, group: str
) -> None:
    for topic in ("a@b", "x" * 128):
        queue = d.MessageQueue(topic=d.Resource(name=topic), id=0)
        update = s.UpdateOffsetRequest(group=d.Resource(name=group), message_queue=queue, offset=2)
        reply = stub.UpdateOffset(update, timeout=5)
        assert reply.status.code == Code.BAD_REQUEST
        assert "topic name" in reply.status.message
    good = unique("offsets")
    admin.create_topic(good, queues=1)
    queue = d.MessageQueue(topic=d.Resource(name=good), id=0)
    update = s.UpdateOffsetRequest(group=d.Resource(name=group), message_queue=queue, offset=2)
    assert stub.UpdateOffset(update, timeout=5).status.code == Code.OK


@pytest.fixture
def auto_stub(tmp_path: Path) -> Iterator[Any]:
    """A broker that creates unknown consumer groups on first use, and a raw stub to it."""
    config = {**BROKER_CONFIG, "broker": {**BROKER_CONFIG["broker"], "auto_create_groups": True}}
    with BrokerProcess(tmp_path, config=config) as broker:
        channel = grpc.insecure_channel(broker.grpc)
        try:
            yield service_pb2_grpc.MessagingServiceStub(channel)
        finally:
            channel.close()


def _consumer_settings(stub: Any, group: str) -> Any:
    settings = d.Settings(
        client_type=d.ClientType.SIMPLE_CONSUMER,
        subscription=d.Subscription(group=d.Resource(name=group)),
    )
    [reply] = list(stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), timeout=5))
    return reply


def test_an_auto_created_group_too_long_for_its_retry_topic_is_a_bad_request(
    auto_stub: Any,
) -> None:
    reply = _consumer_settings(auto_stub, "g" * 121)
    assert reply.status.code == Code.BAD_REQUEST
    assert "retry and dead-letter topics" in reply.status.message
    assert _consumer_settings(auto_stub, "g" * 120).status.code == Code.OK
