"""Between :mod:`pocketmq.model`'s values and the native bodies that are not those values
themselves: send results, groups and transaction states (the messages need no conversion, the
protocol carries them as they are). Both the native server and the proxy, which reads these
back from the wire (docs/proxy.md), use them.
"""

from __future__ import annotations

from pocketmq.errors import Code, InvalidArgumentError
from pocketmq.model import ConsumeFrom, GroupConfig, RetryPolicy, SendOutcome, TransactionStatus
from pocketmq.protocol import structs as w
from pocketmq.protocol.checks import retry_policy_problem

__all__ = [
    "group_from_spec",
    "group_to_spec",
    "send_result_from_wire",
    "send_results_to_wire",
    "transaction_to_wire",
]


def send_results_to_wire(outcomes: list[SendOutcome]) -> list[w.SendResultItem]:
    """Each message's send outcome in the native protocol's form: one call for a send's
    outcomes, not one per message (docs/benchmarks.md, "The send path's front, fewer calls")."""
    items: list[w.SendResultItem] = []
    for outcome in outcomes:  # a loop, not a comprehension: no frame of its own
        items.append(
            w.SendResultItem(
                # the member itself: an IntEnum is encoded as its number (``int()`` of a member
                # is ~680 instructions a message on 3.11, docs/benchmarks.md)
                outcome.code,
                outcome.remark,
                outcome.message_id,
                outcome.queue_id,
                outcome.queue_offset,
                outcome.transaction_id,
                outcome.physical_offset,
                outcome.recall_handle,
                outcome.rule,
            )
        )
    return items


def send_result_from_wire(item: w.SendResultItem, topic: str) -> SendOutcome:
    """The inverse of one item of :func:`send_results_to_wire`; an unknown code is a system
    error."""
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
