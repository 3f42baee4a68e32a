"""The broker's administration and query requests over remoting, the set mqadmin,
rocketmq-dashboard and rocketmq-exporter use most (docs/remoting.md, "Admin and queries"):
topics and subscription groups created, listed and deleted, messages found by key or by
``offsetMsgId``, a group's consume stats, the broker's runtime figures and offset resets.

Bodies are RocketMQ's JSON (``TopicConfigSerializeWrapper``, ``SubscriptionGroupConfig``,
``ConsumeStats``, ``KVTable``, ``ResetOffsetBody``). Two of them are keyed by a
``MessageQueue`` *object*, which fastjson writes and reads as a map key (``{{"brokerName":...,
"queueId":0,"topic":...}:{...}}``): not standard JSON, but what the Java tools expect, so it is
written as fastjson writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from pocketmq.broker.resets import ResetTarget
from pocketmq.broker.topics import PERM_READ, PERM_WRITE
from pocketmq.errors import InvalidArgumentError, MessageNotFoundError
from pocketmq.model import Delivered, GroupConfig, RetryPolicy
from pocketmq.protocol.remoting.codes import RequestCode, ResponseCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.protocol.remoting.stored import encode_stored
from pocketmq.server.remoting import fields as f
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.outcomes import Reply
from pocketmq.server.remoting.records import stored_record
from pocketmq.version import VERSION

__all__ = ["admin_handlers"]

_RW: Final = PERM_READ | PERM_WRITE
#: ``MessageConst``'s flag for a query by ``UNIQ_KEY`` rather than by ``KEYS``.
_UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"


def _queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A ``MessageQueue`` as fastjson writes it (its fields sorted), for use as a map key."""
    return (
        f'{{"brokerName":{json.dumps(broker_name)},"queueId":{queue_id},'
        f'"topic":{json.dumps(topic)}}}'
    )


def _object_map(entries: Iterable[tuple[str, Any]]) -> str:
    """A JSON object whose keys are already JSON (fastjson's object keys, module doc)."""
    return "{" + ",".join(f"{key}:{json.dumps(value)}" for key, value in entries) + "}"


class _SubscriptionGroup(msgspec.Struct, rename="camel"):
    group_name: str = ""
    consume_broadcast_enable: bool = False
    consume_message_orderly: bool = False
    retry_max_times: int = 16
    retry_queue_nums: int = 1


def _body(request: RemotingCommand, kind: type[_SubscriptionGroup]) -> _SubscriptionGroup:
    try:
        return msgspec.json.decode(request.body, type=kind)
    except msgspec.DecodeError as exc:
        raise InvalidArgumentError(f"malformed {kind.__name__.strip('_')} body: {exc}") from None


def admin_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """The administration and query requests (module doc)."""
    return _topic_handlers(side) | _query_handlers(side) | _stats_handlers(side)


def _topic_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """Topics and subscription groups created, listed and deleted."""
    broker = side.broker

    def create_topic(conn: RemotingConnection, request: RemotingCommand) -> None:
        topic = f.text(request, "topic")
        queues = max(
            f.optional_number(request, "writeQueueNums", 0),
            f.optional_number(request, "readQueueNums", 0),
        )
        perm = f.optional_number(request, "perm", _RW) & _RW
        if broker.topics.get(topic) is not None:
            broker.update_topic(topic, queues=queues, perm=perm)
        else:
            kind = "fifo" if f.flag(request, "order") else "normal"
            broker.create_topic(topic, queues=queues or None, topic_type=kind, perm=perm)

    def delete_topic(conn: RemotingConnection, request: RemotingCommand) -> None:
        broker.delete_topic(f.text(request, "topic"))

    def all_topics(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        table = {
            topic.name: {
                "topicName": topic.name,
                "readQueueNums": topic.queues,
                "writeQueueNums": topic.queues,
                "perm": topic.perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": topic.topic_type.value == "fifo",
                "attributes": {},
            }
            for topic in broker.topics.all()
        }
        wrapper = {"topicConfigTable": table, "dataVersion": {"timestamp": 0, "counter": 0}}
        return Reply(body=json.dumps(wrapper).encode())

    def create_group(conn: RemotingConnection, request: RemotingCommand) -> None:
        body = _body(request, _SubscriptionGroup)
        if not body.group_name:
            raise InvalidArgumentError("the subscription group has no groupName")
        broker.create_group(
            GroupConfig(
                name=body.group_name,
                fifo=body.consume_message_orderly,
                broadcast=body.consume_broadcast_enable,
                retry=RetryPolicy(max_retries=body.retry_max_times),
                retry_queues=max(1, body.retry_queue_nums),
            )
        )

    return {
        RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic,
        RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
        RequestCode.GET_ALL_TOPIC_CONFIG: all_topics,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create_group,
    }


def _query_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """Messages found by key, by ``UNIQ_KEY`` and by commit-log offset."""
    broker = side.broker

    def records(messages: Iterable[Delivered], conn: RemotingConnection) -> bytes:
        store_host = side.store_host(conn.local_address or "127.0.0.1:0")
        return encode_stored(stored_record(message, store_host) for message in messages)

    def query(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        topic, key = f.text(request, "topic"), f.text(request, "key")
        limit = max(1, min(f.optional_number(request, "maxNum", 32), 1024))
        begin, end = (
            f.optional_number(request, "beginTimestamp", 0),
            f.optional_number(request, "endTimestamp", 0),
        )
        if f.flag(request, _UNIQUE_KEY_QUERY):
            found = broker.query_messages(message_id=key, max_count=limit)
            found = [m for m in found if m.topic == topic]
        else:
            found = broker.query_messages(topic=topic, key=key, max_count=limit)
            found = [
                m
                for m in found
                if begin <= m.store_timestamp and (not end or m.store_timestamp <= end)
            ]
        if not found:
            return Reply(
                ResponseCode.QUERY_NOT_FOUND, remark=f"no message of {topic!r} with key {key!r}"
            )
        last = max(m.store_timestamp for m in found)
        fields_out = {"indexLastUpdateTimestamp": str(last), "indexLastUpdatePhyoffset": "0"}
        return Reply(ext_fields=fields_out, body=records(found, conn))

    def view(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        offset = f.number(request, "offset")
        record = broker.store.read_message(offset)
        if record is not None and record.message_id:
            for message in broker.query_messages(message_id=record.message_id, max_count=64):
                if message.physical_offset == offset:
                    return Reply(body=records([message], conn))
        raise MessageNotFoundError(f"no message at commit-log offset {offset}")

    return {
        RequestCode.QUERY_MESSAGE: query,
        RequestCode.VIEW_MESSAGE_BY_ID: view,
    }


def _stats_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """A group's consume stats, the broker's runtime figures, offset resets."""
    broker = side.broker
    name = broker.name

    def consume_stats(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        fields = request.ext_fields
        group = f.text(request, "consumerGroup")
        broker.require_group(group)
        wanted = fields.get("topic", "")
        topics = [wanted] if wanted else [t.name for t in broker.topics.all() if not t.system]
        entries: list[tuple[str, Any]] = []
        for topic in topics:
            rows = broker.queue_status(topic, group)
            if not wanted and all(committed < 0 for *_, committed in rows):
                continue  # a topic the group never consumed
            for queue_id, _low, high, committed in rows:
                wrapper = {
                    "brokerOffset": high,
                    "consumerOffset": max(committed, 0),
                    "lastTimestamp": 0,
                }
                entries.append((_queue_key(topic, name, queue_id), wrapper))
        body = f'{{"consumeTps":0.0,"offsetTable":{_object_map(entries)}}}'
        return Reply(body=body.encode())

    def runtime_info(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        status = broker.status()
        table = {"brokerVersionDesc": f"pocketmq {VERSION}", "brokerVersion": "401"}
        table |= _flatten(status)
        counters = status.get("counters")
        if isinstance(counters, Mapping):
            table["msgPutTotalTodayNow"] = str(counters.get("messages_in", 0))
            table["msgGetTotalTodayNow"] = str(counters.get("messages_out", 0))
        return Reply(body=json.dumps({"table": table}).encode())

    def reset(conn: RemotingConnection, request: RemotingCommand) -> Reply:
        topic, group = f.text(request, "topic"), f.text(request, "group")
        timestamp = f.number(request, "timestamp")
        # a time; 0, before every message, is the oldest kept; a negative one past the newest
        if timestamp > 0:
            target = ResetTarget.TIME
        else:
            target = ResetTarget.EARLIEST if timestamp == 0 else ResetTarget.LATEST
        moved = broker.reset_offsets(group, topic, target, max(timestamp, 0))
        table = _object_map((_queue_key(topic, name, q.queue_id), q.after) for q in moved)
        return Reply(body=f'{{"offsetTable":{table}}}'.encode())

    return {
        RequestCode.GET_CONSUME_STATS: consume_stats,
        RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset,
    }


def _flatten(value: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """A nested status as ``KVTable``'s flat string map (``store.disk_free_bytes``, ...)."""
    flat: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            flat |= _flatten(item, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = str(item)
    return flat
