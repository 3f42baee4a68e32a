"""UpdateOffset naming a topic the broker could not keep in offsets.json (a '@', too long) is a
bad request, and the broker still restarts (issue 14, item 10); the offset is not stored."""

from __future__ import annotations

from typing import Any

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from pocketmq.client.sync import SyncAdmin

from .conftest import unique

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
