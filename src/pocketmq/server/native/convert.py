"""Between the broker core's values and the native protocol's structures, both ways where a
gateway needs it (pocketmq.proxy reads delivered messages, send results and groups back from the
wire, docs/proxy.md)."""

from __future__ import annotations

from pocketmq.broker import (
    ConsumeFrom,
    Delivered,
    GroupConfig,
    RetryPolicy,
    SendOutcome,
    TopicConfig,
    TransactionStatus,
)
from pocketmq.errors import Code, InvalidArgumentError
from pocketmq.protocol import structs as w
from pocketmq.protocol.checks import retry_policy_problem

__all__ = [
    "delivered_from_wire",
    "group_from_spec",
    "group_to_spec",
    "send_result_from_wire",
    "send_result_to_wire",
    "to_wire",
    "topic_spec",
    "transaction_to_wire",
]


def topic_spec(topic: TopicConfig) -> w.TopicSpec:
    """A topic's definition as listings, registrations and topic updates carry it."""
    return w.TopicSpec(topic.name, topic.queues, topic.topic_type.value, topic.perm)


def to_wire(message: Delivered, broker_name: str) -> w.DeliveredMessage:
    """A delivered message in the native protocol's form, with the broker's name so a client knows
    where to ack or send it back."""
    return w.DeliveredMessage(
        message.topic,
        message.queue_id,
        message.queue_offset,
        message.body,
        message.properties,
        message.born_timestamp,
        message.store_timestamp,
        message.physical_offset,
        message.delivery_attempt,
        message.receipt_handle,
        message.born_host,
        broker_name,
    )


def delivered_from_wire(message: w.DeliveredMessage) -> Delivered:
    """The inverse of :func:`to_wire` (the broker's name dropped): what a gateway hands its
    protocol adapter."""
    return Delivered(
        message.topic,
        message.queue_id,
        message.queue_offset,
        message.body,
        message.properties,
        message.born_timestamp,
        message.store_timestamp,
        message.physical_offset,
        message.delivery_attempt,
        message.receipt_handle,
        message.born_host,
    )


def send_result_to_wire(outcome: SendOutcome) -> w.SendResultItem:
    """One message's send outcome in the native protocol's form."""
    return w.SendResultItem(
        int(outcome.code),
        outcome.remark,
        outcome.message_id,
        outcome.queue_id,
        outcome.queue_offset,
        outcome.transaction_id,
        outcome.physical_offset,
        outcome.recall_handle,
        outcome.rule,
    )


def send_result_from_wire(item: w.SendResultItem, topic: str) -> SendOutcome:
    """The inverse of :func:`send_result_to_wire`; an unknown code is a system error."""
    try:
        code = Code(item.code)
    except ValueError:
        code = Code.SYSTEM_ERROR
    return SendOutcome(
        code,
        item.remark,
        item.message_id,
        item.queue_id,
        item.queue_offset,
        item.physical_offset,
        item.transaction_id,
        topic,
        item.recall_handle,
        item.rule,
    )


def transaction_to_wire(status: TransactionStatus) -> w.TransactionStateResponse:
    """The broker's record of a transaction in the native protocol's form (times in ms)."""
    return w.TransactionStateResponse(
        status.message_id,
        status.transaction_id,
        status.producer_group,
        status.topic,
        status.queue_id,
        status.state.value,
        status.checks,
        int(status.prepared_at * 1000),
        int(status.updated_at * 1000),
        status.source,
        status.detail,
    )


def group_from_spec(spec: w.GroupSpec, max_delay: float = float("inf")) -> GroupConfig:
    """A group definition from the wire, checked first (retry policy bounds, consume-from), so an
    unusable group is refused when it is created."""
    problem = retry_policy_problem(spec, max_delay)
    if problem is not None:
        raise InvalidArgumentError(problem)
    try:
        consume_from = ConsumeFrom(spec.consume_from)
    except ValueError:
        raise InvalidArgumentError("consume_from must be 'first' or 'last'") from None
    return GroupConfig(
        name=spec.name,
        fifo=spec.fifo,
        broadcast=spec.broadcast,
        consume_from=consume_from,
        retry=RetryPolicy(
            max_retries=spec.max_retries,
            delays=tuple(d / 1000 for d in spec.retry_delays_ms),
            initial=spec.retry_initial_ms / 1000,
            multiplier=spec.retry_multiplier,
            maximum=(spec.retry_max_ms / 1000) if spec.retry_max_ms else 7200.0,
        ),
    )


def group_to_spec(group: GroupConfig) -> w.GroupSpec:
    """A group definition in the native protocol's form (delays in ms), for listings."""
    retry = group.retry
    return w.GroupSpec(
        name=group.name,
        fifo=group.fifo,
        max_retries=retry.max_retries,
        retry_delays_ms=[int(d * 1000) for d in retry.delays],
        broadcast=group.broadcast,
        consume_from=group.consume_from.value,
        retry_initial_ms=int(retry.initial * 1000),
        retry_multiplier=retry.multiplier,
        retry_max_ms=int(retry.maximum * 1000),
    )
